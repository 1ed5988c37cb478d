"""Verification-mode secure aggregation: pairwise additive masking modulo m = 2^q.

This is the masking layer of single-server secure aggregation (Bonawitz et al.,
CCS 2017, Section 4 "one-time pads"; Bagdasaryan et al. 2022, Section 2.3):
every pair of clients (i, j) shares a seed s_ij; client i adds
``PRG(s_ij)`` for every j > i and subtracts it for every j < i, all modulo m.
Each masked vector is uniformly distributed on Z_m^T on its own, but in the
server's sum every pair's mask appears once with + and once with -, so the
masks cancel and the server obtains exactly ``sum_i x_i mod m``.

What is simulated, and what is not:

* Seeds: ``s_ij`` is derived from a per-session key drawn from the run's seeded
  generator and the pair (i, j); in the real protocol it comes from a
  Diffie-Hellman key agreement, so the server never knows it.
* PRG: SplitMix64 in counter mode, vectorised in numpy. It is a fast statistical
  generator, NOT a cryptographic one (deployments use AES-CTR or ChaCha20);
  this module demonstrates the arithmetic, it does not protect real data.
* Arithmetic: numpy uint64 wraps modulo 2^64, so any modulus 2^q with q <= 64 is
  obtained by keeping the low q bits (2^q divides 2^64).
* Dropout recovery is left out. If a client drops after masking, its masks
  with every other client do not cancel; Bonawitz et al. recover them by having
  the survivors reveal Shamir shares of the dropped client's pair seeds (and add
  per-client self-masks so a late client's input stays hidden); Bell et al.
  (CCS 2020) do the same over a sparse neighbour graph. Here clients that drop
  are removed before the masking round (:func:`secure_sum` takes the survivors),
  and :func:`unmask_sum` on a subset of masked vectors shows what goes wrong
  without recovery.
* Cost: O(n^2 T) per shard of n clients with vectors of length T: meant for
  shards of at most a few hundred clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ParamError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
MAX_CLIENTS = 5000


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele, Lea, Flood 2014), elementwise on uint64."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def pair_seeds(session_key: int, n: int) -> np.ndarray:
    """Symmetric ``(n, n)`` uint64 matrix of pair seeds ``s_ij = s_ji`` (diagonal unused)."""
    i, j = np.meshgrid(np.arange(n, dtype=np.uint64), np.arange(n, dtype=np.uint64), indexing="ij")
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64((lo << np.uint64(32)) | hi) ^ np.uint64(session_key))


def prg(seeds: np.ndarray, length: int) -> np.ndarray:
    """Counter-mode stream: ``out[k, t] = splitmix64(seed_k + (t + 1) * golden)``."""
    seeds = np.asarray(seeds, dtype=np.uint64).reshape(-1, 1)
    t = np.arange(1, length + 1, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        return splitmix64(seeds + t * _GOLDEN)


def _check_bits(bits: int) -> int:
    bits = int(bits)
    if not 1 <= bits <= 64:
        raise ParamError(f"the secure-aggregation modulus must be 2^q with 1 <= q <= 64 (got q = {bits})")
    return bits


def _reduce(x: np.ndarray, bits: int) -> np.ndarray:
    if bits == 64:
        return x
    return x & np.uint64((1 << bits) - 1)


def to_signed(x: np.ndarray, bits: int) -> np.ndarray:
    """Representative in ``[-2^(q-1), 2^(q-1))`` of residues modulo 2^q."""
    x = np.asarray(x, dtype=np.uint64)
    if bits == 64:
        return x.view(np.int64)
    v = _reduce(x, bits).astype(np.int64)
    return np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)


def client_masks(seeds: np.ndarray, length: int, bits: int) -> np.ndarray:
    """Every client's total mask ``sum_{j>i} PRG(s_ij) - sum_{j<i} PRG(s_ij)`` mod 2^q."""
    n = seeds.shape[0]
    out = np.zeros((n, length), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(n):
            if n == 1:
                break
            others = np.delete(np.arange(n), i)
            streams = prg(seeds[i, others], length)
            plus = streams[others > i].sum(axis=0, dtype=np.uint64)
            minus = streams[others < i].sum(axis=0, dtype=np.uint64)
            out[i] = plus - minus
    return _reduce(out, bits)


def mask_inputs(x: np.ndarray, bits: int, session_key: int) -> np.ndarray:
    """Clients' masked vectors ``(x_i + mask_i) mod 2^q`` (uint64), one row each."""
    bits = _check_bits(bits)
    x = np.atleast_2d(np.asarray(x, dtype=np.int64))
    n, t = x.shape
    if n > MAX_CLIENTS:
        raise ParamError(f"verification-mode secure aggregation is limited to {MAX_CLIENTS} clients per shard")
    masks = client_masks(pair_seeds(session_key, n), t, bits)
    with np.errstate(over="ignore"):
        return _reduce(x.view(np.uint64) + masks, bits)


def unmask_sum(masked: np.ndarray, bits: int) -> np.ndarray:
    """The server's computation: the sum of the masked vectors modulo 2^q (signed)."""
    bits = _check_bits(bits)
    with np.errstate(over="ignore"):
        s = np.asarray(masked, dtype=np.uint64).sum(axis=0, dtype=np.uint64)
    return to_signed(_reduce(s, bits), bits)


@dataclass
class SecAggResult:
    total: np.ndarray  # int64, what the server obtains: sum mod 2^q, signed
    plain: np.ndarray  # int64, sum of the inputs mod 2^q, signed (for the check)
    masked: np.ndarray  # uint64 (n, T): what each client sent
    bits: int

    @property
    def verified(self) -> bool:
        return bool(np.array_equal(self.total, self.plain))


def secure_sum(x: np.ndarray, bits: int, rng: np.random.Generator) -> SecAggResult:
    """Run the masking protocol on the clients' integer vectors ``x`` (n, T) modulo
    2^q with a fresh session key from ``rng``; return the server's sum and the plain
    sum modulo 2^q for verification."""
    bits = _check_bits(bits)
    x = np.atleast_2d(np.asarray(x, dtype=np.int64))
    key = int(rng.integers(0, 2**63 - 1))
    masked = mask_inputs(x, bits, key)
    with np.errstate(over="ignore"):
        plain = to_signed(_reduce(x.view(np.uint64).sum(axis=0, dtype=np.uint64), bits), bits)
    return SecAggResult(total=unmask_sum(masked, bits), plain=plain, masked=masked, bits=bits)
