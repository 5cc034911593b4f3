"""Replies that read the group's state (``memory.groupstate``): what holds now, what it was, what we decided.

A plan's history is an update chain: the first version, each change, and the head that holds now. When the
messages a question is answered by belong to such a chain, the reply reads the end the question asks for:
"when is the quiz?" leads with the head ("fine, 21st at 8 it is") and shows the changes before it in time
order; "what was the original date?" leads with the first version; "how did it change?" shows the whole
chain. "What did we decide?" lists the heads of the group's decisions, rules and plans. The reply asks a chain
only for questions one can answer (`Question.reads_chain`: a plan's value, or a named version), never a reason.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..groupstate import GroupState
from ..models import StoredMessage
from ..records import Record
from ..store import Store
from .reply import Quoted, Ranking, ReplyBuilder, ReplyDraft

CHAIN_ANCHORS = 2     # a chain answers when one of the reranker's best this many candidates is on it
MAX_EARLIER = 3       # earlier versions shown under the head (the reply stays a chat message)
DECIDED_QUOTES = 5    # heads listed for "what did we decide?"
# What "what did we decide?" shows first: decisions, then rules, then plans; tasks are not decisions.
DECIDED_ORDER = ("decision", "norm", "plan")
LABEL = {"decision": "decision", "norm": "rule", "plan": "plan", "task": "task"}


def node_message(node: Record, messages: dict[int, StoredMessage]) -> StoredMessage | None:
    """The message a chain node quotes (the one whose words it holds), else its latest live source."""
    live = [messages[i] for i in node.sources if i in messages]
    if not live:
        return None
    same = [m for m in live if " ".join(m.text.split()) == " ".join(node.content.split())]
    return same[0] if same else max(live, key=lambda m: (m.ts, m.id))


def asked_end_on_topic(ranking: Ranking, message: StoredMessage, neighbour: StoredMessage | None) -> bool:
    """Whether the message a chain reply would lead with is one of the ranked candidates and either about the
    question by its own words or meaning, or said right after the chain's node next to it (the turns before it,
    or the message it replies to: "fine, 21st at 8 it is" two turns after "quiz moved to the 21st"). A wrong
    link must not put an unrelated message above the evidence."""
    for i in ranking.order:
        c = ranking.cands[i]
        if c.message.id != message.id:
            continue
        if ranking.on_topic(i):
            return True
        near = {p.id for p in c.prev} | ({c.parent.id} if c.parent is not None else set())
        return neighbour is not None and neighbour.id in near
    return False


class StateReader:
    """Reads chains and heads of the group state for the reply."""

    def __init__(self, store: Store, state: GroupState, builder: ReplyBuilder) -> None:
        self.store = store
        self.state = state
        self.builder = builder

    def _messages(self, nodes: Sequence[Record], exclude: frozenset[int]) -> dict[int, StoredMessage]:
        ids = sorted({i for n in nodes for i in n.sources if i not in exclude})
        return {m.id: m for m in self.store.messages(ids) if not m.to_bot}

    def chain_of(self, ranking: Ranking) -> list[Record] | None:
        """The chain (oldest first) that one of the reranker's best candidates rests on, if any has one and is
        itself about the question (a message that only shares a word with it must not pull in its plan)."""
        top = [ranking.cands[i].message.id for i in ranking.order[:CHAIN_ANCHORS] if ranking.on_topic(i)]
        found = self.state.records_of_messages(top)
        for mid in top:
            if mid in found:
                chain = self.state.chain(found[mid])
                return chain or None
        return None

    def draft(self, era: str, chain: list[Record], stems: Sequence[str], strength: float,
              exclude: frozenset[int] = frozenset(), ranking: Ranking | None = None) -> ReplyDraft | None:
        """The reply from a chain, read at the end ``era`` asks for; None when its messages are gone or it never
        changed (then there is no end to choose)."""
        messages = self._messages(chain, exclude)
        nodes = [(n, m) for n in chain if (m := node_message(n, messages)) is not None]
        if not nodes:
            return None
        if len(nodes) == 1:
            return None  # nothing changed: the evidence reply, which quotes more than one message, stands
        end, beside = (nodes[0][1], nodes[1][1]) if era == "earlier" else (nodes[-1][1], nodes[-2][1])
        if ranking is not None and not asked_end_on_topic(ranking, end, beside):
            return None  # a chain is only as good as its links: the message it would lead with must be on topic
        if era == "earlier":
            later = nodes[1:]
            tail = later if len(later) <= MAX_EARLIER else [*later[:MAX_EARLIER - 1], later[-1]]
            shown = [(nodes[0][1], "first")] + [(m, "then") for _, m in tail[:-1]] + [(tail[-1][1], "now")]
            lead = "It was first this, and changed later:"
        elif era == "history":
            picked = nodes if len(nodes) <= MAX_EARLIER + 1 else [nodes[0], *nodes[-MAX_EARLIER:]]
            shown = [(m, "earlier") for _, m in picked[:-1]] + [(picked[-1][1], "now")]
            lead = "Here's how it changed, oldest first:"
        else:
            head, before = nodes[-1], nodes[:-1][-MAX_EARLIER:]
            # newest first: each "before that" is older than the line above it
            shown = [(head[1], "now")] + [(m, "before that") for _, m in reversed(before)]
            lead = "Here's where it stands now, with what it replaced:"
        quoted = [Quoted(n + 1, m, q.quote, label) for n, ((m, label), q)
                  in enumerate(zip(shown, self.builder.quotes([m for m, _ in shown], stems)))]
        return ReplyDraft(lead, quoted, False, "state", strength)

    def decided(self, scope_ids: list[int], exclude: frozenset[int] = frozenset()) -> ReplyDraft | None:
        """The heads of the group's decisions, rules and plans, decisions first, newest first within each."""
        heads = [h for h in self.state.heads(scope_ids, utypes=DECIDED_ORDER)]
        if not heads:
            return None
        full = self.state.records.get([h.id for h in heads], with_sources=True)
        messages = self._messages(full, exclude)
        picked: list[tuple[StoredMessage, str]] = []
        kinds: set[str] = set()
        for h in sorted(full, key=lambda r: (DECIDED_ORDER.index(r.utype), -r.ts, -r.id)):
            m = node_message(h, messages)
            if m is not None and all(m.id != p.id for p, _ in picked):
                changed = h.prev_id is not None
                picked.append((m, LABEL[h.utype] + (", changed" if changed else "")))
                kinds.add(h.utype)
            if len(picked) >= DECIDED_QUOTES:
                break
        if not picked:
            return None
        quoted = [Quoted(n + 1, m, q.quote, label) for n, ((m, label), q)
                  in enumerate(zip(picked, self.builder.quotes([m for m, _ in picked], [])))]
        lead = ("Here's what the group has settled, decisions first:" if "decision" in kinds and len(kinds) > 1
                else "Here's what the group has settled:")  # say "decisions first" only where there are some
        return ReplyDraft(lead, quoted, False, "group", 1.0)
