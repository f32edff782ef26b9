"""Comparing the language of two runs whose last frames may not have advanced every request equally."""
from __future__ import annotations


def same_text(texts: dict, ref: dict) -> None:
    """Every request of both runs: equal when both finished, else the unfinished one's text starts the other's. (oxygen
    may not have advanced its last frame's requests yet, with 4 slots.)"""
    common = set(texts) & set(ref)
    assert len(common) >= max(len(texts), len(ref)) - 2
    for rid in common:
        text, done = texts[rid]
        ref_text, ref_done = ref[rid]
        if done and ref_done:
            assert text == ref_text, f"request {rid}"
        else:
            short, long = sorted((text, ref_text), key=len)
            assert long.startswith(short), f"request {rid}: {text!r} vs {ref_text!r}"
