"""Requests of one RL iteration: prompts, GRPO groups, response lengths, turns and tool calls.

A *request* is one response to one prompt (GRPO samples ``G`` responses per prompt: ``G``
requests share a prompt, a *group*). A multi-turn (agentic) request alternates generation turns
and tool calls: turn ``i`` generates ``turn_tokens[i]`` tokens, then (except after the last turn)
a tool runs for ``tool_s[i]`` seconds and appends ``observation_tokens`` to the context.

Lengths (assumptions and sources):

* single-turn response lengths: :func:`estimators.lengths.sample_grouped` (ServeGen DeepSeek-R1
  production mixture, or a parametric log-normal / fixed length), correlated within a group
  through a per-prompt difficulty factor, clipped at ``max_response_tokens``;
* multi-turn: the request's total response length is drawn the same way and split over its
  turns with Dirichlet(2, ..., 2) shares (turns differ in length; the mean split is even, as
  :func:`estimators.phases.rollout_s` assumes); each turn gets at least one token;
* tool latency: RollPacker's 2,001 measured code-sandbox executions
  (:func:`estimators.lengths.sample_tool_latency_s`), a fixed value, or the user's own (a trace
  column or a quantile table, :mod:`estimators.traces`);
* prompt lengths: ``prompt_tokens`` for every request, or one draw per group from the user's
  prompt-length table.

Everything is drawn from the generator passed in, so one seed gives one workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from estimators.lengths import DEFAULT_PROMPT_SPREAD, LengthDistribution, ResidualTable, sample_grouped, sample_tool_latency_s


@dataclass
class Request:
    rid: int
    group: int  # prompt id: requests of one GRPO group share the prompt prefix
    prompt_tokens: int
    turn_tokens: list  # tokens generated in each turn
    tool_s: list  # tool latency after turn i (len = turns - 1)
    observation_tokens: int = 0
    # progress
    turn: int = 0
    generated_in_turn: float = 0.0  # tokens of the current turn already generated (kept across preemption/migration)
    submitted_s: float = 0.0
    done_s: Optional[float] = None
    finishes: int = 0  # times the request was reported finished (must end at exactly 1)
    turn_done_s: list = field(default_factory=list)
    engine: Optional[int] = None  # engine that holds (or last held) it
    computed_tokens: float = 0.0  # context tokens whose KV was computed at some point
    prefilled_tokens: float = 0.0
    reprefilled_tokens: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.turn_tokens)

    @property
    def response_tokens(self) -> int:
        return int(sum(self.turn_tokens))

    def context_tokens(self) -> float:
        """Tokens in the context now: prompt, finished turns with their observations, and this turn so far."""
        done = sum(self.turn_tokens[: self.turn]) + self.turn * self.observation_tokens
        return self.prompt_tokens + done + self.generated_in_turn

    def remaining_in_turn(self) -> float:
        return self.turn_tokens[self.turn] - self.generated_in_turn

    @property
    def tool_calls_done(self) -> int:
        return self.turn

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens + (self.turns - 1) * self.observation_tokens


@dataclass(frozen=True)
class WorkloadSpec:
    """How to draw one iteration's requests."""

    n_prompts: int
    group_size: int
    prompt_tokens: int
    max_response_tokens: int
    lengths: LengthDistribution
    turns: int = 1
    observation_tokens: int = 0
    tool_latency_fixed_s: Optional[float] = None  # None: RollPacker's measured latencies
    prompt_spread: float = DEFAULT_PROMPT_SPREAD  # log-space spread of per-prompt difficulty (see estimators.lengths.sample_grouped)
    tool_latency_table: Optional[tuple] = None  # the user's tool latencies (s), inverse CDF grid (estimators.traces)
    prompt_table: Optional[tuple] = None  # the user's prompt lengths (tokens), inverse CDF grid: one draw per GRPO group

    @property
    def n_requests(self) -> int:
        return self.n_prompts * self.group_size


def make_requests(spec: WorkloadSpec, rng: np.random.Generator, rid0: int = 0) -> list[Request]:
    dist = replace(spec.lengths, max_tokens=spec.max_response_tokens)
    total = sample_grouped(dist, spec.n_prompts, spec.group_size, rng, spec.prompt_spread).astype(float)
    n = total.size
    turns = max(1, spec.turns)
    if turns == 1:
        splits = total[:, None]
    else:
        shares = rng.dirichlet(np.full(turns, 2.0), size=n)
        splits = np.maximum(1.0, np.round(shares * total[:, None]))
    if turns > 1:
        if spec.tool_latency_fixed_s is not None:
            tools = np.full((n, turns - 1), float(spec.tool_latency_fixed_s))
        elif spec.tool_latency_table is not None:
            tools = _draw(spec.tool_latency_table, n * (turns - 1), rng).reshape(n, turns - 1)
        else:
            tools = sample_tool_latency_s(n * (turns - 1), rng).reshape(n, turns - 1)
    else:
        tools = np.zeros((n, 0))
    if spec.prompt_table is not None:  # a group's samples share their prompt
        per_group = np.maximum(1.0, np.round(_draw(spec.prompt_table, spec.n_prompts, rng)))
        prompts = np.repeat(per_group, spec.group_size)[:n]
    else:
        prompts = np.full(n, float(spec.prompt_tokens))
    reqs = []
    for i in range(n):
        reqs.append(Request(
            rid=rid0 + i, group=(rid0 + i) // spec.group_size,
            prompt_tokens=int(prompts[i]), turn_tokens=[int(x) for x in splits[i]],
            tool_s=[float(x) for x in tools[i]], observation_tokens=int(spec.observation_tokens)))
    return reqs


def _draw(table, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws from the distribution whose inverse CDF is ``table`` on a uniform grid."""
    t = np.asarray(table, dtype=float)
    return np.interp(rng.random(n), np.linspace(0.0, 1.0, t.size), t)


def residual_table(spec: WorkloadSpec) -> ResidualTable:
    """:class:`estimators.lengths.ResidualTable` of the lengths this workload draws (the grouped
    marginal: base distribution x per-prompt difficulty), what a rollout manager estimates from its
    past iterations; the simulator reports its estimate as the rollout's ``remaining_tokens``."""
    return ResidualTable.of(spec.lengths, spec.max_response_tokens, spec.prompt_spread)


