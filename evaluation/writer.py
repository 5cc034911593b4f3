"""``chorus eval writer``: how well a model writes memory on real group chats.

Each conversation is written end to end by the configured model. Reported: parse
rate, acceptance rate, rejection reasons, records per person (the least active
speaker included) and per layer, update chains, model time, and a re-verification
of every committed record against its source messages.
"""
from __future__ import annotations

import json
import re
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from memory.analysis.runner import AnalysisPass
from memory.analysis.shipped import shipped_models
from memory.datasets import load_dataset
from memory.embeddings.base import Embedder
from memory.llm.base import LLM
from memory.records import GROUP, Records
from memory.records_sync import attach
from memory.store import Store
from memory.writer.grounding import ground
from memory.writer.insights import Persona
from memory.writer.writer import Writer, WriterConfig

from .report import markdown_table
from .stores import safe_name
from .writer_reference import ReferenceReport, reference_files, score_stores


def reason_kind(reason: str) -> str:
    """Group rejection reasons by their stable prefix (names and ids stripped)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|E\d+|\d+", "…", reason)
    return text.split(";")[0][:70]


def reverify_store(store: Store, threshold: float) -> tuple[int, list[int]]:
    """Re-check every active non-insight record against its source messages; return (checked, failing ids)."""
    failing: list[int] = []
    with store.read() as conn:
        rows = conn.execute("SELECT id, content FROM records WHERE status = 'active' AND layer != 'persona_insight'"
                            ).fetchall()
        checked = 0
        for rid, content in rows:
            texts = [r[0] for r in conn.execute(
                "SELECT m.text FROM record_sources rs JOIN messages m ON m.id = rs.message_id "
                "WHERE rs.record_id = ? AND m.deleted = 0", (rid,))]
            checked += 1
            if not texts or ground(content, texts).score < threshold:
                failing.append(rid)
        # An insight rests on the facts it cites: at least one must resolve to an active record.
        for rid, resolves in conn.execute(
                "SELECT r.id, EXISTS (SELECT 1 FROM record_links l JOIN records f ON f.id = l.to_id "
                "WHERE l.from_id = r.id AND l.kind = 'cites' AND f.status = 'active') FROM records r "
                "WHERE r.status = 'active' AND r.layer = 'persona_insight'").fetchall():
            checked += 1
            if not resolves:
                failing.append(rid)
    return checked, failing


@dataclass
class WriterReport:
    dataset: str
    model: str
    conversations: int = 0
    windows: int = 0
    parsed: int = 0
    failed: int = 0
    proposed: int = 0
    accepted: int = 0
    reasons: Counter = field(default_factory=Counter)
    per_layer: Counter = field(default_factory=Counter)
    chains: int = 0
    gen_tokens: int = 0
    gen_seconds: float = 0.0
    seconds: float = 0.0
    messages: int = 0
    reverified: int = 0
    reverify_failures: int = 0
    people: list[dict] = field(default_factory=list)
    reference: ReferenceReport | None = None

    def to_json(self) -> dict:
        return {"reference": self.reference.to_json() if self.reference else None,
            "dataset": self.dataset, "model": self.model, "conversations": self.conversations,
            "messages": self.messages, "windows": self.windows,
            "parse_rate": round(self.parsed / self.windows, 4) if self.windows else None,
            "failed_windows": self.failed, "actions_proposed": self.proposed, "records_accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.proposed, 4) if self.proposed else None,
            "rejection_reasons": dict(self.reasons.most_common()), "records_per_layer": dict(self.per_layer),
            "update_chains": self.chains, "generation_tokens_per_s": round(self.gen_tokens / self.gen_seconds, 2)
            if self.gen_seconds else None, "model_seconds": round(self.gen_seconds, 1),
            "wall_seconds": round(self.seconds, 1),
            "messages_per_minute": round(60 * self.messages / self.seconds, 1) if self.seconds else None,
            "reverified_records": self.reverified, "reverify_failures": self.reverify_failures,
            "people": self.people}

    def to_markdown(self) -> str:
        j = self.to_json()
        summary = markdown_table(["measure", "value"], [
            ["conversations / messages / windows", f"{self.conversations} / {self.messages} / {self.windows}"],
            ["model outputs that parse", f"{100 * (j['parse_rate'] or 0):.1f}%"],
            ["windows failed", self.failed],
            ["actions proposed / records committed", f"{self.proposed} / {self.accepted}"],
            ["committed records passing re-verification", f"{self.reverified - self.reverify_failures} / "
                                                           f"{self.reverified}"],
            ["update chains (2+ nodes)", self.chains],
            ["generation speed", f"{j['generation_tokens_per_s']} tokens/s"],
            ["writer throughput", f"{j['messages_per_minute']} messages/min"]])
        layers = markdown_table(["layer", "records"], sorted(self.per_layer.items()))
        reasons = markdown_table(["rejection reason", "count"], self.reasons.most_common(12))
        # GROUP is not a speaker (it owns the group layers); list it apart.
        speakers = [p for p in self.people if p["person"] != GROUP]
        least = sorted(speakers, key=lambda p: (p["messages"], p["records"]))[: min(10, len(speakers))]
        group = sum(p["records"] for p in self.people if p["person"] == GROUP)
        people = markdown_table(["conversation", "person", "messages", "records"],
                                [[p["conversation"], p["person"], p["messages"], p["records"]] for p in least])
        return (f"### Writer on {self.dataset} with {self.model}\n\n{summary}\n\n{layers}\n\n"
                f"Least active speakers:\n\n{people}\n\nGroup-owned records (GROUP): {group}\n\n"
                f"Speakers with no record: {sum(p['records'] == 0 for p in speakers)} of {len(speakers)}\n\n{reasons}"
                + (f"\n\n{self.reference.to_markdown()}" if self.reference else ""))


def evaluate_writer(dataset: str, *, data: str | Path | None, embedder: Embedder | None, llm: LLM,
                    config: WriterConfig | None = None, persona: Persona | None = None,
                    limit_conversations: int | None = None, store_dir: str | Path | None = None,
                    progress: bool = True, reference: str | Path | None = None) -> WriterReport:
    conversations = load_dataset(dataset, data)[:limit_conversations]
    config = config or WriterConfig()
    report = WriterReport(dataset, getattr(llm, "name", "model"))
    refs = reference_files(reference) if reference else {}
    if reference:
        report.reference = ReferenceReport(str(reference))
    started = time.perf_counter()
    total = sum(len(c.messages) for c in conversations)
    bar = tqdm(total=total, desc=f"eval writer {dataset}", unit="msg", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="chorus-eval-") as tmp:
        folder = Path(store_dir) if store_dir else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for conv in conversations:
            path = folder / f"{safe_name(conv.id)}.db"
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            store = Store(path, embedder=embedder, idle_gap_s=config.idle_gap_s)
            try:
                store.ingest(conv.messages, embed=embedder is not None)
                records = Records(store)
                attach(store, records, threshold=config.grounding_threshold)
                if config.after_analysis:  # the analysis pass reads the chat first, as the bot does
                    AnalysisPass(store, records, *shipped_models()).run()
                writer = Writer(store, llm, config=config, persona=persona, records=records)

                def tick(res) -> None:
                    bar.update(res.n_messages)
                    bar.set_postfix(records=report.accepted)

                results = writer.run_pending(force=True, progress=tick)
                report.conversations += 1
                report.messages += len(conv.messages)
                report.windows += len(results)
                report.parsed += sum(r.parsed for r in results)
                report.failed += sum(r.status == "failed" for r in results)
                with store.read() as conn:
                    for acc, rej, toks, secs in conn.execute(
                            "SELECT accepted, rejected, completion_tokens, gen_seconds FROM writer_runs"):
                        acc_l, rej_l = json.loads(acc), json.loads(rej)
                        report.accepted += len(acc_l)
                        report.proposed += len(acc_l) + sum(1 for r in rej_l if "truncated_output" not in
                                                            json.dumps(r.get("action", "")))
                        report.reasons.update(reason_kind(r["reason"]) for r in rej_l)
                        report.gen_tokens += toks
                        report.gen_seconds += secs
                    for layer, n in conn.execute("SELECT layer, count(*) FROM records WHERE status = 'active' "
                                                 "GROUP BY layer"):
                        report.per_layer[layer] += n
                    report.chains += conn.execute("SELECT count(*) FROM (SELECT chain_id FROM records GROUP BY "
                                                  "chain_id HAVING count(*) > 1)").fetchone()[0]
                sid = store.scopes()[0].id
                counts = Counter(r.owner for r in records.heads([sid]))
                for p in store.roster(sid):
                    report.people.append({"conversation": conv.id, "person": p.display_name,
                                          "messages": p.n_messages, "records": counts.get(p.person_id, 0)})
                report.people.append({"conversation": conv.id, "person": GROUP, "messages": 0,
                                      "records": counts.get(GROUP, 0)})
                checked, failing = reverify_store(store, config.grounding_threshold)
                report.reverified += checked
                report.reverify_failures += len(failing)
            finally:
                store.close()
            ref_file = refs.get(conv.id) or (next(iter(refs.values())) if len(refs) == 1 else None)
            if report.reference is not None and ref_file is not None:
                report.reference.networks += score_stores({conv.id: path}, ref_file, conv.id).networks
    bar.close()
    report.seconds = time.perf_counter() - started
    return report
