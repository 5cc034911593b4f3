"""SpeakerLevenshtein: owner-bucketed, coordinate-gated soft matching of memory records.

Scores a writer's derived records against a reference set the way SpeakerMem-R1
(arXiv 2609.26780, main text Eq. 7 and Appendix E Eqs. 13-16) does:

* similarity  k~ = 0.6 * tokenF1 + 0.4 * seqratio          (Eq. 13)
* gated       k  = k~ if owner, source and layer agree and k~ >= 0.5, else 0   (Eq. 14)
* per owner   F_p = 2 * sum(k over max-weight one-to-one matching) / (|pred_p| + |ref_p|)  (Eq. 16)
* overall     0.8 * mean_p F_p + 0.2 * min_p F_p           (Eq. 7)

Despite the name there is no edit distance anywhere; the name is kept for parity
with the paper. Choices the paper leaves open are marked "unspecified" below.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import numpy as np

W_TOKEN, W_SEQ = 0.60, 0.40          # Eq. 13
MATCH_THRESHOLD = 0.50               # Eq. 14
W_MEAN, W_WORST = 0.80, 0.20         # Eq. 7

# Appendix E normaliser: lowercase, ASCII [a-z0-9]+ runs, each CJK character its own token.
# Which scripts count as "CJK" is unspecified; we take Han, kana and Hangul syllables.
_TOKEN_RE = re.compile(r"[a-z0-9]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@dataclass(frozen=True)
class MemRecord:
    """One derived memory record. Only owner, source and layer gate a match (Eq. 14);
    utype/session/time are carried for callers but deliberately ignored by the score."""
    owner: str
    content: str
    layer: str = ""
    utype: str = ""
    source: str = ""
    session: int | None = None
    time: float | None = None


@dataclass
class SLResult:
    """Overall score plus the per-owner breakdown needed to debug a reward."""
    score: float
    per_owner: dict[str, float] = field(default_factory=dict)
    worst_owner: str | None = None
    matched: list[tuple[MemRecord, MemRecord, float]] = field(default_factory=list)
    n_pred: int = 0
    n_ref: int = 0

    @property
    def n_matched(self) -> int:
        return len(self.matched)


def norm_name(name: str) -> str:
    """Owner/source key: case-insensitive, whitespace collapsed, so 'Big  Ben' == 'big ben'."""
    return " ".join(name.split()).casefold()


def tokens(text: str) -> list[str]:
    """The Appendix E token sequence T(c)."""
    return _TOKEN_RE.findall(text.lower())


def token_f1(a: str, b: str) -> float:
    """Set-based token F1 (as the paper's Eq. 11 defines F1: duplicates removed, 0 when
    either side or the overlap is empty), over the Appendix E tokens. Which tokeniser
    Eq. 13 uses is unspecified; we reuse T(c) so both terms see the same tokens."""
    ta, tb = set(tokens(a)), set(tokens(b))
    common = len(ta & tb)
    if not ta or not tb or not common:
        return 0.0
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)


def sequence_ratio(a: str, b: str, *, by_token: bool = False) -> float:
    """difflib ratio 2m/(|a|+|b|). Appendix E says the tokens are joined with spaces and
    the stock SequenceMatcher.ratio() is taken, which makes it a character-level ratio
    (the default here). Eq. 15 reads as token-level; by_token=True gives that reading."""
    ta, tb = tokens(a), tokens(b)
    if by_token:
        return difflib.SequenceMatcher(None, ta, tb).ratio()
    return difflib.SequenceMatcher(None, " ".join(ta), " ".join(tb)).ratio()


def pair_similarity(a: str, b: str) -> float:
    """Ungated soft content match k~ (Eq. 13)."""
    return W_TOKEN * token_f1(a, b) + W_SEQ * sequence_ratio(a, b)


def gated_similarity(p: MemRecord, r: MemRecord) -> float:
    """k (Eq. 14): zero unless owner, source and layer agree and k~ clears 0.5."""
    if (norm_name(p.owner), norm_name(p.source), norm_name(p.layer)) != (
            norm_name(r.owner), norm_name(r.source), norm_name(r.layer)):
        return 0.0
    k = pair_similarity(p.content, r.content)
    return k if k >= MATCH_THRESHOLD else 0.0


def hungarian(cost: np.ndarray) -> list[tuple[int, int]]:
    """Minimum-cost assignment (shortest augmenting paths with potentials, O(n^2 m)).

    Rectangular input is fine: every row (or every column, whichever side is smaller)
    is assigned. Returns (row, col) pairs sorted by row. Written here to avoid scipy.
    """
    c = np.asarray(cost, dtype=float)
    if c.ndim != 2 or c.size == 0:
        return []
    transposed = c.shape[0] > c.shape[1]
    if transposed:
        c = c.T
    n, m = c.shape
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    owner = np.zeros(m + 1, dtype=int)      # owner[j] = 1-based row assigned to column j; 0 = free
    way = np.zeros(m + 1, dtype=int)
    for i in range(1, n + 1):
        owner[0], j0 = i, 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            free = ~used[1:]
            reduced = c[i0 - 1] - u[i0] - v[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:                            # flip the augmenting path
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    pairs = [(int(owner[j]) - 1, j - 1) for j in range(1, m + 1) if owner[j]]
    if transposed:
        pairs = [(b, a) for a, b in pairs]
    return sorted(pairs)


def _match(pred: list[MemRecord], ref: list[MemRecord]) -> tuple[float, list[tuple[MemRecord, MemRecord, float]]]:
    """Maximum-weight one-to-one alignment; zero-weight assignments are not matches."""
    if not pred or not ref:
        return 0.0, []
    k = np.array([[gated_similarity(p, r) for r in ref] for p in pred])
    pairs = [(pred[i], ref[j], float(k[i, j])) for i, j in hungarian(-k) if k[i, j] > 0]
    return sum(w for _, _, w in pairs), pairs


def owner_score(pred: list[MemRecord], ref: list[MemRecord]) -> float:
    """F_p (Eq. 16) for one owner's records: soft Dice over the best matching, so both
    omissions and extra records lower it. Empty vs empty is 1.0 (unspecified)."""
    if not pred and not ref:
        return 1.0
    total, _ = _match(pred, ref)
    return 2 * total / (len(pred) + len(ref))


def _buckets(records: list[MemRecord]) -> dict[str, list[MemRecord]]:
    out: dict[str, list[MemRecord]] = {}
    for r in records:
        out.setdefault(norm_name(r.owner), []).append(r)
    return out


def speaker_levenshtein(pred: list[MemRecord], ref: list[MemRecord]) -> SLResult:
    """Phi_SL (Eq. 7) over the union of owners seen on either side.

    An owner present on one side only scores F_p = 0, which Eq. 16 yields directly.
    Both sets empty -> 1.0 (nothing to get wrong; the paper leaves this unspecified).
    """
    pb, rb = _buckets(pred), _buckets(ref)
    owners = sorted(pb.keys() | rb.keys())
    if not owners:
        return SLResult(score=1.0)
    per_owner: dict[str, float] = {}
    matched: list[tuple[MemRecord, MemRecord, float]] = []
    for o in owners:
        p, r = pb.get(o, []), rb.get(o, [])
        total, pairs = _match(p, r)
        per_owner[o] = 2 * total / (len(p) + len(r))
        matched += pairs
    worst = min(owners, key=lambda o: per_owner[o])
    mean = sum(per_owner.values()) / len(owners)
    return SLResult(score=W_MEAN * mean + W_WORST * per_owner[worst], per_owner=per_owner,
                    worst_owner=worst, matched=matched, n_pred=len(pred), n_ref=len(ref))
