"""Attribution in the gate: is a record filed under the right person and layer?

SpeakerMem-R1 defines the person layers by who speaks about whom: a
``per_speaker_core`` record is a self-report (owner = source = the author of the
supporting message); a ``per_speaker_profile`` record is what its author says about
someone else, owned by that person, who must be named, aliased, @mentioned or replied
to in the message. A GROUP record must rest on a message that speaks for the group.
Grounding only checks the words; this checks the filing. Where the fix is
unambiguous the filing is corrected and the correction recorded in the record's
verification (a core record proposed under someone else becomes its author's; a
profile record under the author, naming nobody, becomes their core record; a
profile naming exactly one other person goes to that person); otherwise the
proposal is rejected with the reason.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..models import StoredMessage
from ..records import GROUP_LAYERS
from .acts import GroupAct
from .cues import People, speaks_for_group


@dataclass
class Filing:
    owner: str
    layer: str
    corrections: list[str] = field(default_factory=list)
    reason: str | None = None     # set when the proposal must be rejected
    group_basis: str | None = None


def check_filing(owner: str, layer: str, msg: StoredMessage, window: Sequence[StoredMessage], people: People,
                 display: dict[str, str], acts: Mapping[int, GroupAct | None]) -> Filing:
    """The filing the record may commit under (possibly corrected), or a rejection reason."""
    author = msg.author_id
    shown = lambda pid: display.get(pid, pid)  # noqa: E731
    if layer in GROUP_LAYERS:
        basis = speaks_for_group(msg, window, acts)
        if basis is None:
            return Filing(owner, layer, reason=f"a GROUP record must rest on a message that speaks for the group "
                                               f"(a group act by the analysis pass, or a reply thread); message "
                                               f"{msg.msg_id} by {shown(author)} does not")
        return Filing(owner, layer, group_basis=basis)
    referenced = people.referenced(msg, window)
    if layer == "per_speaker_core":
        if owner == author:
            return Filing(owner, layer)
        # A core record is what its message's author says of themself: whoever else the model picked, the
        # statement is the author's own (even when it names the picked person, it is the author speaking).
        return Filing(author, layer, [f"owner {shown(owner)} -> {shown(author)}: a core record is a self-report "
                                      "of the message's author"])
    # per_speaker_profile
    if owner in referenced:
        return Filing(owner, layer)
    if owner == author and not referenced:
        return Filing(owner, "per_speaker_core", [f"layer per_speaker_profile -> per_speaker_core: "
                                                  f"{shown(author)} wrote about themself"])
    if len(referenced) == 1:
        return Filing(referenced[0], layer, [f"owner {shown(owner)} -> {shown(referenced[0])}: the only person "
                                             f"message {msg.msg_id} names or replies to"])
    return Filing(owner, layer, reason=f"a per_speaker_profile record must be about someone the message names, "
                                       f"@mentions or replies to; message {msg.msg_id} does not refer to "
                                       f"{shown(owner)}")

