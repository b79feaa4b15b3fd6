"""What runs in the next step: continuous batching, chunked prefill, admission, preemption.

Each step has a token budget. Running requests come first, oldest first, so streams that are
decoding keep their pace (one token each); a request still prefilling takes a chunk of what is
left of the budget. Then waiting requests are admitted, first come first served, while the
batch has room, budget is left and the KV blocks for their whole prompt can be had (a request
waits, never fails, when they cannot). The blocks of a prompt's cached prefix are shared, not
computed again. When a running request needs a block and none is left, the newest running
request is preempted: its blocks are freed and it goes back to the head of the queue, to be
recomputed (prompt and generated tokens) when blocks are free again.

Stall-free prefill: while some request decodes, the prompt tokens of a step (chunks of running
and newly admitted requests together) are capped at ``prefill_chunk``. A decode step reads
every weight once whatever its row count, and up to a few hundred rows its matrix products stay
bound by that read, so a small prompt chunk beside the decode rows costs the decoding streams
little; a step of thousands of prompt tokens is compute-bound and holds every stream for tens
of milliseconds. When nothing decodes (an idle server's first requests), prompts take the whole
budget: their first tokens come sooner, and no stream waits. :data:`DEFAULT_PREFILL_CHUNK` says
why there is no cap by default.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from .block_manager import BlockManager, block_hashes
from .request import Request, RequestStatus
from .runner import ScheduledChunk

__all__ = ["DEFAULT_PREFILL_CHUNK", "StepPlan", "StepPlanner"]

#: Prompt tokens per step while requests decode, by default: no cap. A step's linear layers stay
#: bound by the weight read up to roughly (tensor FLOP/s) / (memory bytes/s) rows (about 250-300
#: on an H100 in bfloat16), so 64 decode rows plus a prompt chunk of up to 192 tokens cost the GPU
#: little more than a decode step, and such a step runs as a mixed step (:mod:`.decode_graphs`,
#: up to 256 rows), replayed from a CUDA graph. Measured on an H100 (8B shape, 64 clients,
#: 128/128, steady state, one run): a cap of 192 served 6.9k tokens/s with an ITL p99 of 10 ms,
#: no cap 6.1k with 53 ms. The cap stays opt-in until the exact-answer tests (served greedy
#: text equal to ``generate``) have run under it on the CPU and the GPU: with a cap, where a
#: prompt is cut depends on what else is decoding at that moment.
DEFAULT_PREFILL_CHUNK: int | None = None


@dataclass
class StepPlan:
    """The chunks of one step, and what the planning did to other requests."""

    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    #: Requests that can never get the blocks they need (alone in the batch, cache full).
    out_of_room: list[Request] = field(default_factory=list)
    #: Prompt blocks looked up in the prefix cache, and found, by the admissions of this step.
    prefix_queried: int = 0
    prefix_hit: int = 0


class StepPlanner:
    """Holds the waiting queue and the running batch; :meth:`plan` decides each step."""

    def __init__(
        self,
        blocks: BlockManager,
        *,
        max_batch: int,
        max_batched_tokens: int,
        prefill_chunk: int | None = None,
        whole_prompts: bool = False,
    ) -> None:
        self.blocks = blocks
        #: Prompt tokens a step takes at most while some request decodes (None: no cap but the
        #: step's budget). Whole prompts ignore it: a prompt is never split there.
        self.prefill_chunk = prefill_chunk
        #: Steps that waiting prompts may be held back while requests decode, until together
        #: they fill ``prefill_chunk`` (0: admitted at once). Fewer, fuller steps with prompt
        #: chunks: each costs the decoding streams a step's fixed overhead.
        self.prefill_hold = 0
        self._held = 0  # consecutive steps prompts were held back
        #: Schedule each prompt in one chunk and every later token alone (batch-invariant
        #: engines): a prompt that does not fit the step's budget waits for a step whose budget
        #: it fits (one longer than the whole budget runs as the step's only prompt); a
        #: preempted request is recomputed as it was first computed, its prompt whole, then its
        #: generated tokens one a step.
        self.whole_prompts = whole_prompts
        self.max_batch = max_batch
        self.max_batched_tokens = max_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self.blocks.block_size

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def free(self, request: Request) -> None:
        """Give back the request's blocks and forget its computed tokens."""
        self.blocks.release(request.blocks)
        request.blocks = []
        request.block_hashes = []
        request.num_computed = 0

    def remove(self, request: Request) -> None:
        """Take a request out of the queue or the batch and free its blocks (it is finished)."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.free(request)

    def _preempt(self, victim: Request, plan: StepPlan) -> None:
        self.running.remove(victim)
        self.free(victim)
        victim.status = RequestStatus.WAITING
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        plan.preempted.append(victim)

    def _grow(self, request: Request, upto: int, plan: StepPlan) -> bool:
        """Give ``request`` blocks for its first ``upto`` tokens, preempting newer requests.

        False when it was preempted itself (or can never fit).
        """
        need = self._blocks_for(upto) - len(request.blocks)
        while self.blocks.available < need:
            victim = self.running[-1]
            if victim is request:
                if len(self.running) == 1:
                    plan.out_of_room.append(request)
                else:
                    self._preempt(request, plan)
                return False
            self._preempt(victim, plan)
        for _ in range(need):
            request.blocks.append(self.blocks.allocate())
        return True

    def _admit(self, request: Request, plan: StepPlan) -> bool:
        """Share the request's cached prefix and check its prompt's blocks can be had."""
        tokens = len(request.tokens)
        hashes = block_hashes(request.tokens, self.block_size)
        # At least one token is computed even on a full hit: its logits give the next token.
        usable = hashes[: (tokens - 1) // self.block_size]
        hit = self.blocks.match_prefix(usable)
        need = self._blocks_for(tokens) - len(hit) + self.blocks.cost_of(hit)
        if self.blocks.available < need:
            return False
        self.blocks.take(hit)
        plan.prefix_queried += len(usable)
        plan.prefix_hit += len(hit)
        request.blocks = list(hit)
        request.block_hashes = hashes[: len(hit)]
        request.num_computed = len(hit) * self.block_size
        if request.preemptions == 0:
            request.cached_tokens = request.num_computed
        return True

    def plan(self) -> StepPlan:
        """Pick the next step's chunks (empty when nothing can run)."""
        plan = StepPlan()
        budget = self.max_batched_tokens
        # Prompt tokens this step may take: ``prefill_chunk`` while a request decodes. Whole
        # prompts are never capped (the step's budget alone decides, see _prompt_waits).
        decoding = self._decoding() and not self.whole_prompts
        cap = self.prefill_chunk
        prefill = min(budget, cap) if decoding and cap is not None else budget
        for request in list(self.running):
            if budget == 0:
                break
            if request.status is not RequestStatus.RUNNING:
                continue  # preempted while making room for an older one
            left = len(request.tokens) - request.num_computed
            # Whole prompts: a recomputed request's generated tokens go one a step, as decode
            # tokens, so its keys and values are those its first computation wrote.
            if self.whole_prompts or left == 1:
                count = 1
            else:
                count = min(left, budget, prefill)
                if count == 0:
                    continue  # the step's prompt tokens are spent: decode rows still go
                prefill -= count
            if not self._grow(request, request.num_computed + count, plan):
                continue
            plan.chunks.append(
                ScheduledChunk(request, request.num_computed, count, sample=count == left)
            )
            budget -= count
        if not self._hold(decoding, prefill):
            self._admit_waiting(plan, budget, prefill)
        return plan

    def _ahead_budget(self, decode_rows: int, prompt_tokens: int) -> tuple[int, int]:
        """``(tokens, prompt tokens)`` a step planned ahead has left beside what it holds."""
        budget = max(0, self.max_batched_tokens - decode_rows - prompt_tokens)
        cap = self.prefill_chunk
        if decode_rows and cap is not None:
            return budget, min(budget, max(0, cap - prompt_tokens))
        return budget, budget

    def continue_prompts(
        self, decode_rows: int, prompts: Sequence[tuple[Request, int]]
    ) -> list[ScheduledChunk] | None:
        """The next chunks of prompts left half done, in a step planned ahead of the host.

        ``prompts``: ``(request, first token not computed yet)`` of running requests, in their
        order; ``decode_rows``: the step's decode rows. Chunks within the step's budget and
        prefill cap, as :meth:`plan` would make them. Takes their blocks, never preempting:
        None (nothing taken) when the free blocks do not suffice. Not for whole prompts.
        """
        budget, prefill = self._ahead_budget(decode_rows, 0)
        picked: list[tuple[Request, int, int, int]] = []
        need = 0
        for request, start in prompts:
            left = len(request.tokens) - start
            count = min(left, budget, prefill)
            if count <= 0:
                continue  # the step's prompt tokens are spent: it waits for the next
            need += max(0, self._blocks_for(start + count) - len(request.blocks))
            picked.append((request, start, count, left))
            budget -= count
            prefill -= count
        if need > self.blocks.available:
            return None
        chunks = []
        for request, start, count, left in picked:
            while len(request.blocks) < self._blocks_for(start + count):
                request.blocks.append(self.blocks.allocate())
            chunks.append(ScheduledChunk(request, start, count, sample=count == left))
        return chunks

    def plan_admissions(self, decode_rows: int, prompt_tokens: int = 0) -> StepPlan:
        """The prompt chunks of waiting requests admitted beside ``decode_rows`` decode rows.

        For a step planned ahead of the host (the engine's lookahead): the running requests
        each decode one token, or go on with their prompts (``prompt_tokens`` in all), planned
        by the engine; this admits what the step's budget and prefill cap leave room for.
        Never preempts (an admission needs its whole prompt's blocks free). Not for whole
        prompts.
        """
        plan = StepPlan()
        budget, prefill = self._ahead_budget(decode_rows, prompt_tokens)
        if not self._hold(decode_rows > 0, prefill):
            self._admit_waiting(plan, budget, prefill)
        return plan

    def unadmit(self, chunks: Sequence[ScheduledChunk]) -> None:
        """Undo the admissions of ``chunks`` (made by :meth:`plan_admissions`, never run).

        Their requests go back to the head of the queue in their order, their blocks freed
        (shared prefix blocks stay cached); a later plan admits them again.
        """
        for chunk in reversed(chunks):
            request = chunk.request
            self.running.remove(request)
            self.free(request)
            request.status = RequestStatus.WAITING
            self.waiting.appendleft(request)

    def _hold(self, decoding: bool, prefill: int) -> bool:
        """Whether this step holds the waiting prompts back (``prefill_hold``).

        Only while requests decode, for at most ``prefill_hold`` steps in a row, and only while
        the waiting prompts' tokens fall short of a full chunk (``prefill`` tokens) and their
        number of the batch's free places.
        """
        free = self.max_batch - len(self.running)
        if (
            not (self.prefill_hold and decoding and self.waiting) or self.whole_prompts
            or len(self.waiting) >= free
        ):  # fmt: skip
            self._held = 0
            return False
        tokens = 0
        for request in self.waiting:
            tokens += len(request.tokens)
            if tokens >= prefill:
                break
        if tokens >= prefill or self._held >= self.prefill_hold:
            self._held = 0
            return False
        self._held += 1
        return True

    def _admit_waiting(self, plan: StepPlan, budget: int, prefill: int) -> None:
        """Admit waiting requests, first come first served, and schedule their prompt chunks."""
        while (
            self.waiting and min(budget, prefill) > 0 and len(self.running) < self.max_batch
            and not plan.preempted
        ):  # fmt: skip
            request = self.waiting[0]
            if self.whole_prompts and self._prompt_waits(request, budget, plan):
                break
            if not self._admit(request, plan):
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            left = len(request.tokens) - request.num_computed
            if self.whole_prompts:
                count = self._prompt_left(request)
            else:
                count = min(left, budget, prefill)
                prefill -= count
            if not self._grow(request, request.num_computed + count, plan):
                break
            plan.chunks.append(
                ScheduledChunk(request, request.num_computed, count, sample=count == left)
            )
            budget = max(0, budget - count)

    def _decoding(self) -> bool:
        """Whether a running request decodes: its next token is its only one left to compute."""
        return any(
            r.status is RequestStatus.RUNNING and len(r.tokens) - r.num_computed == 1
            for r in self.running
        )

    @staticmethod
    def _prompt_left(request: Request) -> int:
        """Whole prompts: the prompt tokens still to compute (all of them: no prefix cache)."""
        return len(request.prompt_ids) - request.num_computed

    def _prompt_waits(self, request: Request, budget: int, plan: StepPlan) -> bool:
        """Whole prompts: whether ``request``'s prompt waits for a later step's budget.

        It fits the budget left, or it is the step's first prompt (a prompt longer than the
        whole budget would otherwise never run).
        """
        if self._prompt_left(request) <= budget:
            return False
        return any(c.start == 0 for c in plan.chunks)

    def after_step(self, plan: StepPlan) -> None:
        """Advance the computed counts and register the blocks the step filled."""
        for chunk in plan.chunks:
            r = chunk.request
            if r.status is RequestStatus.FINISHED:  # ended meanwhile: its blocks are gone
                continue
            r.num_computed = chunk.start + chunk.count
            full = r.num_computed // self.block_size
            if full > len(r.block_hashes):
                known = r.tokens[: full * self.block_size]
                start = r.block_hashes[-1] if r.block_hashes else b""
                done = len(r.block_hashes)
                new = block_hashes(known[done * self.block_size :], self.block_size, start)
                for i, h in enumerate(new, start=done):
                    self.blocks.register(r.blocks[i], h)
                r.block_hashes.extend(new)
