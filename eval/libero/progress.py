"""A tqdm progress bar for evaluations: episodes done, running success rate, errors, ETA."""
from __future__ import annotations

import sys

from tqdm import tqdm


class EvalProgress:
    """Counts finished episodes (including ones finished by an earlier, resumed run) and shows the success rate."""

    def __init__(self, total: int, done_records: list[dict], desc: str = "eval", disable: bool = False):
        self.successes = sum(bool(r.get("success")) for r in done_records if r.get("status") == "ok")
        self.ok = sum(r.get("status") == "ok" for r in done_records)
        self.errors = len(done_records) - self.ok
        self.bar = tqdm(total=total, initial=len(done_records), desc=desc, unit="ep", dynamic_ncols=True,
                        file=sys.stderr, disable=disable, smoothing=0.1)
        self._refresh()

    def _refresh(self) -> None:
        rate = f"{100 * self.successes / self.ok:.1f}%" if self.ok else "n/a"
        self.bar.set_postfix_str(f"success {rate} ({self.successes}/{self.ok}), errors {self.errors}", refresh=False)

    def update(self, record: dict) -> None:
        if record.get("status") == "ok":
            self.ok += 1
            self.successes += bool(record.get("success"))
        else:
            self.errors += 1
            where = f"ep {record.get('episode')}" if record.get("scene") is None else f"scene {record['scene']}"
            self.bar.write(f"episode {record.get('suite')} task {record.get('task_id')} seed {record.get('seed')} "
                           f"{where} failed with an error: {record.get('error')}", file=sys.stderr)
        self._refresh()
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> EvalProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
