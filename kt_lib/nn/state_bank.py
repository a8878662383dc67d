"""A bank of per-step states for recurrences whose step t reads, per student, the state stored
by an earlier step of its own choosing (SKVMN's hops, ReKT's last attempt at the same item).

# B batch, L steps, W state width
Slot 0 holds the initial state and slot t + 1 what step t stored; each step reads one slot per
student. Written with plain tensor ops (a [B, L+1, W] buffer filled in place and read by
indexing), autograd would zero-fill or copy the whole buffer once per read and per write in the
backward: O(L^2) work. Here `load` gathers with one index op and `store` hands each slot's
gradient back to the step that wrote it: O(L). The token `store` returns orders the backward:
every `load` of a later step depends on it, so all of them add their gradients to the bank
before the store that wrote the slot hands the sum on.

    bank = StateBank(L, z0)              # z0 [B, W]: slot 0
    token = bank.store(z0.new_zeros(()), 0, z0)
    for t in range(L):
        z = f(bank.load(token, slots[t]))    # slots [L, B]: which slot each student reads
        token = bank.store(token, t + 1, z)
"""

from __future__ import annotations

import torch


class StateBank:
    """One forward's stored states, [L + 1, B, W], and the gradients reads add to them."""

    def __init__(self, L: int, like: torch.Tensor):
        B, W = like.shape
        self.states = like.new_empty(L + 1, B, W)
        self.grads: torch.Tensor | None = None
        self.rows = torch.arange(B, device=like.device)

    def store(self, token: torch.Tensor, slot: int, x: torch.Tensor) -> torch.Tensor:
        """Write x [B, W] to `slot`; returns the token the next loads and stores take."""
        return _Store.apply(x, token, self, slot)

    def load(self, token: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Student b's state in slot slots[b]: [B] -> [B, W]."""
        return _Load.apply(token, self, slots)


class _Store(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, token, bank: StateBank, slot: int):
        bank.states[slot] = x
        ctx.bank, ctx.slot = bank, slot
        return token.new_zeros(())

    @staticmethod
    def backward(ctx, g_token):
        bank = ctx.bank
        if bank.grads is None:  # no step read any state (the loss reached no load)
            return bank.states.new_zeros(bank.states.shape[1:]), g_token, None, None
        g = bank.grads[ctx.slot].clone()
        bank.grads[ctx.slot].zero_()  # consumed: a second backward of the graph starts from zero
        return g, g_token, None, None


class _Load(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, bank: StateBank, slots):
        ctx.bank, ctx.slots = bank, slots
        return bank.states[slots, bank.rows]

    @staticmethod
    def backward(ctx, g):
        bank = ctx.bank
        if bank.grads is None:
            bank.grads = torch.zeros_like(bank.states)
        bank.grads.index_put_((ctx.slots, bank.rows), g.to(bank.grads.dtype), accumulate=True)
        return torch.zeros((), dtype=g.dtype, device=g.device), None, None
