"""What `/status` and `chorus status` tell a user: what is remembered here and how far memory is.

Counts only: reading the status never loads a model and never writes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from memory.records import Records
from memory.store import Store
from memory.writer.writer import Writer


@dataclass
class Status:
    messages: int  # chat messages (questions to the bot and its replies not included)
    to_bot: int
    scopes: int
    members: int
    records: int  # current memory records (heads)
    waiting_for_writer: int
    quarantined: int
    pending_embeddings: int
    pending_analysis: int
    replies: str  # how replies are made
    insights: str = ""  # whether persona insights are written, and why not
    model_error: str | None = None
    failed_analysis: int = 0
    analysis: str = ""  # why the analysis pass is not running, when it is not

    def text(self) -> str:
        lines = [f"Messages remembered: {self.messages} from {self.members} member(s) in {self.scopes} "
                 f"channel(s){f', plus {self.to_bot} question(s) to me' if self.to_bot else ''}.",
                 f"Memory records: {self.records}; {self.waiting_for_writer} message(s) not yet read by the "
                 f"writer{f', {self.quarantined} window(s) set aside after failing' if self.quarantined else ''}.",
                 f"Messages waiting for embeddings: {self.pending_embeddings}.",
                 f"Messages waiting for the analysis (acts, decisions, plans): {self.pending_analysis}"
                 + (f", {self.failed_analysis} it could not read (see the log)" if self.failed_analysis else "")
                 + (f"; {self.analysis}" if self.analysis else "") + ".",
                 f"Replies: {self.replies}."]
        if self.insights:
            lines.append(f"Insights: {self.insights}.")
        if self.model_error:
            lines.append(f"Language model: unavailable ({self.model_error}).")
        return "\n".join(lines)

    def data(self) -> dict:
        return asdict(self)


def read_status(store: Store, records: Records, writer: Writer, scope_ids: list[int], *, replies: str,
                model_error: str | None = None, insights: str = "", analysis: str = "") -> Status:
    """The status of ``scope_ids`` (every scope of the store when the caller passes them all)."""
    wanted = set(scope_ids)
    lag = [s for s in writer.lag() if s.scope_id in wanted]
    return Status(
        messages=sum(store.count_messages(s, bot_traffic=False) for s in scope_ids),
        to_bot=sum(store.count_messages(s, bot_traffic=True) for s in scope_ids),
        scopes=len(scope_ids),
        members=len({p.person_id for s in scope_ids for p in store.roster(s) if not p.is_bot}),
        records=sum(records.count(s, heads_only=True) for s in scope_ids),
        waiting_for_writer=sum(s.pending_messages for s in lag),
        quarantined=sum(s.quarantined for s in lag),
        pending_embeddings=store.pending_embeddings(scope_ids),  # never another channel's backlog
        pending_analysis=store.pending_analysis(scope_ids),
        failed_analysis=store.failed_analysis(scope_ids),
        analysis=analysis,
        replies=replies,
        insights=insights,
        model_error=model_error)
