"""What `mcpower ingest` says of its plan: the line before a long embedding, a dry run's answer,
and the duplicates it skipped (mcpower/plan.py, mcpower/duplicates.py)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from mcpower.cli.progress import plural

if TYPE_CHECKING:
    from mcpower.duplicates import Duplicate
    from mcpower.ingestion import IngestPlan, IngestReport

EXAMPLES = 3  # duplicates named per kind; --json lists them all
RESUME_HINT = "Ctrl-C keeps what is embedded: the same command resumes"


def cost(plan: IngestPlan) -> str:
    """'~17 min at 4.9 chunks/s (measured on 16 chunks)', or '' without an estimate."""
    if plan.estimate_seconds is None or not plan.to_embed:
        return ""
    per = plan.chunks_per_second or 0.0
    speed = f"{per:.0f}" if per >= 10 else f"{per:.1f}"
    return f"~{about(plan.estimate_seconds)} at {speed} chunks/s ({plan.rate_basis})"


def about(seconds: float) -> str:
    """An estimate's time, no more precise than it is: '8 s', '45 s', '29 min', '1 h 05 min'."""
    if seconds < 10:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 60:
        return f"{round(seconds / 5) * 5:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def plan_line(plan: IngestPlan) -> str:
    """The line said before a long embedding starts (stderr): 'plan: 268 documents (266 duplicates
    skipped), 5,829 chunks, 5,813 to embed (16 from the embedding store), ~30 min at 3.2 chunks/s
    (measured on 16 chunks). Ctrl-C keeps ...'."""
    documents = plural(plan.documents, "document")
    if plan.duplicates:
        documents += f" ({plural(plan.duplicates, 'duplicate')} skipped)"
    kept = [
        f"{plan.carried:,} kept from the previous version" if plan.carried else "",
        f"{plan.from_store:,} from the embedding store" if plan.from_store else "",
    ]
    embed = f"{plan.to_embed:,} to embed" + (f" ({', '.join(k for k in kept if k)})" if any(kept) else "")
    estimate = cost(plan)
    return (
        f"plan: {documents}, {plural(plan.chunks, 'chunk')}, {embed}"
        + (f", {estimate}" if estimate else "")
        + (f". {RESUME_HINT}" if plan.stored else "")
    )


def dry_run_lines(report: IngestReport) -> list[str]:
    """A dry run's answer (stdout): files, chunks, time, what would be removed."""
    plan = report.plan
    found = plan.read + plan.unchanged + plan.duplicates + plan.skipped
    lines = [f"{report.dataset_id}: dry run, nothing published"]
    lines.append(
        f"  files: {found:,} found: {plan.read:,} to read ({report.added:,} new, {report.changed:,} changed), "
        f"{plan.unchanged:,} unchanged, {plural(plan.duplicates, 'duplicate')} and {plan.skipped:,} skipped"
    )
    lines.append(
        f"  chunks: {plan.chunks:,} in {plural(plan.documents, 'document')}: {plan.to_embed:,} to embed, "
        f"{plan.carried:,} kept from the previous version, {plan.from_store:,} from the embedding store"
    )
    if plan.to_embed:
        time = cost(plan) or "unknown"
        if plan.sampled:
            time += f"; those {plan.sampled} chunks were embedded to time the model"
            time += ", and are kept" if plan.sample_kept else ""
        lines.append(f"  time: {time}")
    if report.rebuild_reason:
        lines.append(f"  full rebuild: {report.rebuild_reason}")
    removed = plan.removed
    if removed:
        shown = ", ".join(removed[:EXAMPLES]) + (", ..." if len(removed) > EXAMPLES else "")
        lines.append(f"  would remove {plural(len(removed), 'document')}: {shown}")
    else:
        lines.append("  would remove nothing")
    return lines


def duplicate_lines(duplicates: list[Duplicate]) -> list[str]:
    """The duplicates skipped, by kind, with a few examples of which was kept (stderr)."""
    if not duplicates:
        return []
    by_why: dict[str, list[Duplicate]] = defaultdict(list)
    for d in duplicates:
        by_why[d.why].append(d)
    lines = [
        f"skipped {plural(len(duplicates), 'duplicate')} of documents kept "
        "(--keep-duplicates keeps them; --json lists them all):"
    ]
    for why, found in sorted(by_why.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(f"{d.path} (kept {d.kept})" for d in found[:EXAMPLES])
        lines.append(f"  {len(found):,} {why}: {shown}" + (", ..." if len(found) > EXAMPLES else ""))
    return lines
