"""The XR0 prompt: Qwen3-VL chat messages (for a processor's `apply_chat_template`) and their rendered text.

Action mode (what the published policy is trained and served with; physical-ai-studio `preprocessor.py`
`_build_message`, rosmontis2005 `orchardbench_dataset.py` `policy_messages`, the CALVIN eval's literal string):

    <|im_start|>user
    The following observations are captured from multiple views.
    # Base View
    <|vision_start|><|image_pad|><|vision_end|>
    # Left-Wrist View
    <|vision_start|><|image_pad|><|vision_end|>
    Generate robot actions for the task:
    {instruction} /no_cot<|im_end|>
    <|im_start|>assistant
    <cot></cot><|im_end|>

(no system turn; the processor expands each `<|image_pad|>` to the image's merged-patch count). The DiT tokens follow
this whole text. `/no_cot` with an empty `<cot></cot>` is the switch off of a chain-of-thought text mode (like
Qwen3's `/no_think` with an empty `<think></think>`); the language mode here asks `/cot` and opens the assistant turn
with `<cot>`, so the model writes its reasoning and stops at `</cot>` (or `<|im_end|>`). That mode is inferred from
the switch's form: no published code generating it was found.
"""
from __future__ import annotations

from typing import Any

HEADER = "The following observations are captured from multiple views.\n"
TASK = "Generate robot actions for the task:\n{instruction} {switch}"
NO_COT, COT = "/no_cot", "/cot"
EMPTY_COT = "<cot></cot>"
COT_OPEN, COT_CLOSE = "<cot>", "</cot>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
COT_STOP = (COT_CLOSE, IM_END)

# deploy/server.py's view titles, as physical-ai-studio `_VIEW_TITLES` records them
VIEW_TITLES = {"base": "Base", "wrist_left": "Left-Wrist", "wrist_right": "Right-Wrist"}


def view_title(view: str) -> str:
    key = view.replace("-", "_")
    return VIEW_TITLES.get(key) or " ".join(w.capitalize() for w in key.split("_"))


def user_content(instruction: str, views: list[str], images: list[Any] | None = None, *, cot: bool = False):
    """The user turn as processor content items; `images[i]` (PIL, array) is placed in view i's slot."""
    items: list[dict[str, Any]] = [{"type": "text", "text": HEADER}]
    for i, view in enumerate(views):
        image = {"type": "image"} if images is None else {"type": "image", "image": images[i]}
        items += [{"type": "text", "text": f"# {view_title(view)} View\n"}, image, {"type": "text", "text": "\n"}]
    switch = COT if cot else NO_COT
    items.append({"type": "text", "text": TASK.format(instruction=instruction.strip(), switch=switch)})
    return items


def action_messages(instruction: str, views: list[str], images: list[Any] | None = None) -> list[dict[str, Any]]:
    """The action-mode conversation: user turn, then the assistant's empty chain of thought."""
    return [
        {"role": "user", "content": user_content(instruction, views, images)},
        {"role": "assistant", "content": [{"type": "text", "text": EMPTY_COT}]},
    ]


def cot_messages(instruction: str, views: list[str], images: list[Any] | None = None) -> list[dict[str, Any]]:
    """The language-mode conversation: the user turn with `/cot`; generation opens the assistant turn."""
    return [{"role": "user", "content": user_content(instruction, views, images, cot=True)}]


def render_chat(messages: list[dict[str, Any]], *, add_generation_prompt: bool = False) -> str:
    """Qwen3-VL's chat format for these messages (text items verbatim, one image placeholder per image item)."""
    out = []
    for m in messages:
        body = "".join(IMAGE if item["type"] == "image" else item["text"] for item in m["content"])
        out.append(f"{IM_START}{m['role']}\n{body}{IM_END}\n")
    if add_generation_prompt:
        out.append(f"{IM_START}assistant\n")
    return "".join(out)


def action_prompt(instruction: str, views: list[str]) -> str:
    """The text the DiT's tokens follow."""
    return render_chat(action_messages(instruction, views))


def cot_prompt(instruction: str, views: list[str]) -> str:
    """The text a chain-of-thought request decodes after: it ends in the opened `<cot>`; stop at `COT_STOP`."""
    return render_chat(cot_messages(instruction, views), add_generation_prompt=True) + COT_OPEN


def language_turn(prompt: str) -> str:
    """A language task's continuation of the action-mode conversation (the shared prefix ends with its `<|im_end|>`
    and newline): a follow-up user turn asking `prompt` in the chain-of-thought mode, the assistant turn opened with
    `<cot>`. The model writes its reasoning and ends at `</cot>` or its turn's `<|im_end|>` (the eos)."""
    return f"{IM_START}user\n{prompt.strip()} {COT}{IM_END}\n{IM_START}assistant\n{COT_OPEN}"
