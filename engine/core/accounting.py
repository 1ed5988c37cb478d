"""Privacy ledger: every mechanism records what it spends and how it composes.

Entries compose sequentially unless they belong to the same ``group`` with
``composition="parallel"`` (disjoint data, e.g. one Laplace draw per cell at
one level): a parallel group costs its maximum, a sequential run of entries
costs its sum (basic composition, pure epsilon-DP).

An entry's ``epsilon`` is what the step actually spent. When that is more than
the step was planned to spend (a distributed sum whose shards kept fewer clients
than their noise was planned for), ``planned_epsilon`` keeps the plan:
:meth:`Ledger.total` is the spent epsilon, :meth:`Ledger.planned_total` the plan.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .epsilon import check_spent


@dataclass(frozen=True)
class LedgerEntry:
    step: str
    epsilon: float
    composition: str = "sequential"  # or "parallel"
    group: str = ""  # parallel entries of one group cost their max
    delta: float = 0.0
    note: str = ""
    planned_epsilon: float | None = None  # set when the step spent more than planned (excess dropout)


@dataclass
class Ledger:
    entries: list[LedgerEntry] = field(default_factory=list)
    side_information: list[str] = field(default_factory=list)

    def spend(self, step: str, epsilon: float, **kw) -> None:
        self.entries.append(LedgerEntry(step, check_spent(epsilon), **kw))

    def note_side_information(self, text: str) -> None:
        """Record a quantity read from the data without spending budget."""
        if text not in self.side_information:
            self.side_information.append(text)

    def total(self) -> float:
        """The epsilon spent (composed as in the module docstring)."""
        return self._compose(lambda e: e.epsilon)

    def planned_total(self) -> float:
        """The epsilon the steps were planned to spend (equal to :meth:`total` unless a step
        recorded a ``planned_epsilon``)."""
        return self._compose(lambda e: e.epsilon if e.planned_epsilon is None else e.planned_epsilon)

    def _compose(self, eps_of) -> float:
        seq = 0.0
        groups: dict[str, float] = {}
        for e in self.entries:
            if e.composition == "parallel":
                key = e.group or e.step
                groups[key] = max(groups.get(key, 0.0), eps_of(e))
            else:
                seq += eps_of(e)
        return seq + sum(groups.values())

    def total_delta(self) -> float:
        return sum(e.delta for e in self.entries)

    def check(self, budget: float, rtol: float = 1e-9) -> None:
        """Raise if the ledger spends more than ``budget``."""
        if self.total() > budget * (1 + rtol) + 1e-15:
            raise AssertionError(f"ledger spends {self.total()} > budget {budget}")

    def to_dict(self) -> dict:
        return {
            "total_epsilon": self.total(),
            "planned_epsilon": self.planned_total(),
            "total_delta": self.total_delta(),
            "entries": [asdict(e) for e in self.entries],
            "side_information": list(self.side_information),
        }
