"""Privacy ledger: every mechanism records what it spends and how it composes.

Entries compose sequentially unless they belong to the same ``group`` with
``composition="parallel"`` (disjoint data, e.g. one Laplace draw per cell at
one level): a parallel group costs its maximum, a sequential run of entries
costs its sum (basic composition, pure epsilon-DP).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class LedgerEntry:
    step: str
    epsilon: float
    composition: str = "sequential"  # or "parallel"
    group: str = ""  # parallel entries of one group cost their max
    delta: float = 0.0
    note: str = ""


@dataclass
class Ledger:
    entries: list[LedgerEntry] = field(default_factory=list)
    side_information: list[str] = field(default_factory=list)

    def spend(self, step: str, epsilon: float, **kw) -> None:
        if epsilon < 0:
            raise ValueError("negative epsilon")
        self.entries.append(LedgerEntry(step, float(epsilon), **kw))

    def note_side_information(self, text: str) -> None:
        """Record a quantity read from the data without spending budget."""
        if text not in self.side_information:
            self.side_information.append(text)

    def total(self) -> float:
        seq = 0.0
        groups: dict[str, float] = {}
        for e in self.entries:
            if e.composition == "parallel":
                key = e.group or e.step
                groups[key] = max(groups.get(key, 0.0), e.epsilon)
            else:
                seq += e.epsilon
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
            "total_delta": self.total_delta(),
            "entries": [asdict(e) for e in self.entries],
            "side_information": list(self.side_information),
        }
