"""The engine: requests in, tokens out, with continuous batching over a paged KV cache.

:meth:`Engine.submit` queues a request from any thread; the engine thread (:meth:`start`) runs
:meth:`step` while there is work: plan the step (:mod:`.planner`), run every scheduled token in
one forward pass (:mod:`.runner`; decode-only steps by :mod:`.decode_graphs`), sample the
requests whose known tokens are all computed (:mod:`.sampler`), then hand each request its new
text to its ``sink``. Requests join and leave the batch at every step.

The host work of a step overlaps the GPU's: once a step's kernels are queued, the text of the
previous step's tokens is made (incremental detokenizer, stop strings) and handed to the sinks
while the GPU computes; then the engine waits for the step's sampled ids (its one host wait),
records them, and frees the blocks of requests that hit an EOS id or their length. A request
that a stop string ends is therefore computed one step too far; that token is dropped.

Steps that only decode run one step ahead (``lookahead``): while step N computes, step N+1 is
planned on the host as if every request goes on, and queued on the ids step N samples on the
device (copied into its inputs on the GPU), before the host reads them. The GPU then never
waits for the host between decode steps. A request that step N ends (an EOS id, a stop string)
had its step N+1 row computed for nothing: that token is dropped, and the key and value it
wrote land in the request's own block before the block can be handed out again (one stream
orders both). Requests waiting for admission join such a step: their prompt chunks run beside
the decode rows (a mixed step's graph, or the flattened path for a step too large for one;
the decode rows take the device-side ids either way), and the step after them is queued
ahead in turn, as is the next chunk of a prompt left half done. Lookahead stops, and the next
step is planned from the host's state, whenever a request asks for log-probabilities or a
repetition penalty (both need the host's tokens), a block cannot be had without preemption,
or the step's shape has no CUDA graph yet (it is captured on that planned step).

Engines that share a process with a model that has a latency promise take host turns
(:meth:`Engine.share_host`, :mod:`.host_priority`): the protected engine's host work goes
first, the others step aside between their phases.

Without the thread, :meth:`step` can be called directly (tests) and :meth:`generate` runs one
request to its end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import pygpukit as gp

from ..errors import LLMError
from ..model import CausalLM, _kv_budget
from .block_manager import BlockManager
from .decode_graphs import DecodeGraphs
from .host_priority import HostPriority
from .invariant import invariant_step_logits
from .metrics import EngineMetrics
from .paged_cache import BLOCK_SIZE, PagedKVCache, block_bytes
from .params import RequestParams
from .planner import DEFAULT_PREFILL_CHUNK, StepPlan, StepPlanner
from .request import Request, RequestOutput, RequestStatus, Sink, TokenLogprob
from .runner import ModelRunner, ScheduledChunk, build_inputs
from .sampler import SampledTokens
from .side_stream import upload
from .step_times import StepTimes

__all__ = ["Engine", "EngineClosedError", "QueueFullError"]

log = logging.getLogger("pygpukit.llm.engine")

_ids = itertools.count()


class QueueFullError(LLMError):
    """The waiting queue holds ``max_queue`` requests: try again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class EngineClosedError(LLMError):
    """The engine was shut down: it takes no new request."""


class _Collected:
    """A sink that keeps a caller's outputs and counts its finished requests.

    Called on the engine thread; it takes the engine's lock (``wake``'s) and wakes the callers
    waiting on it.
    """

    def __init__(self, wake: threading.Condition) -> None:
        self._wake = wake
        self.items: list[RequestOutput] = []
        self.finished = 0

    def sink(self, out: RequestOutput) -> None:
        """Keep ``out``; count its request as finished when it is the last."""
        with self._wake:
            self.items.append(out)
            self.finished += out.finish_reason is not None
            self._wake.notify_all()

    def has_more_than(self, seen: int) -> bool:
        """Whether more than ``seen`` outputs have come."""
        return len(self.items) > seen

    def has_finished(self, requests: int) -> bool:
        """Whether ``requests`` requests have finished."""
        return self.finished >= requests


@dataclasses.dataclass
class _Launched:
    """A step whose kernels are queued: its plan, the requests it samples, their tokens."""

    plan: StepPlan
    sampled: list[Request]
    pending: SampledTokens
    #: Seconds the host spent queuing the step (inputs, forward pass, sampling).
    launch_s: float = 0.0


class Engine:
    """Continuous batching for one :class:`~pygpukit.llm.CausalLM`.

    ``max_batch``: requests in the running batch at most; ``max_queue``: requests waiting for
    admission at most (more raise :class:`QueueFullError`); ``max_batched_tokens``: tokens per
    step (decode tokens plus prefill chunks: a long prompt is prefilled over several steps,
    between decode steps of the others); ``prefill_chunk``: prompt tokens per step at most while
    some request decodes (None: no cap below ``max_batched_tokens``), so that prefill rides
    beside the decode rows instead of stalling them (:mod:`.planner`); ``kv_memory``: the
    paged KV cache's size in bytes, a fraction of the device memory, or a size string
    (``"2GiB"``, ``"0.5"``; None: a quarter of the device, 1 GiB on the CPU backend);
    ``partition``: a :class:`pygpukit.scheduler.Partition` whose memory the
    cache and every step's temporaries are charged to, and whose stream the steps run on;
    ``prefix_caching``: share the KV blocks of equal prompt prefixes between requests.
    ``name`` is the model name the server shows.
    ``cuda_graphs``: replay decode-only steps, and steps with prompt chunks of up to 256 token
    rows, as CUDA graphs, one per shape bucket (:mod:`.decode_graphs`; default: on the CUDA
    backend); off, those steps run eagerly on the same padded inputs.
    ``lookahead``: queue the next decode step on the device-side sampled ids before the host
    reads them (the module's docstring says when); off, every step is planned from the
    host's tokens.
    ``batch_invariant``: a request's tokens do not depend on what else is batched, and greedy
    answers equal ``CausalLM.generate``'s bit for bit on the GPU (:mod:`.invariant`): decode
    rows run the batched twins of ``generate``'s one-token kernels, prompts are prefilled whole
    and alone, and prefix caching is off (``prefix_caching`` then defaults to False and may not
    be True). Slower decode at large batches (docs/serve.md).
    """

    def __init__(
        self,
        model: CausalLM,
        *,
        name: str | None = None,
        max_batch: int = 64,
        max_queue: int = 256,
        max_batched_tokens: int = 512,
        prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK,
        kv_memory: int | float | str | None = None,
        partition: Any = None,
        prefix_caching: bool | None = None,
        cuda_graphs: bool | None = None,
        lookahead: bool = True,
        batch_invariant: bool = False,
    ) -> None:
        if batch_invariant and prefix_caching:
            raise ValueError(
                "batch_invariant=True computes every prompt whole: it cannot share cached "
                "prefixes (leave prefix_caching unset or False)"
            )
        if prefix_caching is None:
            prefix_caching = not batch_invariant
        for label, value in (("max_batch", max_batch), ("max_queue", max_queue),
                             ("max_batched_tokens", max_batched_tokens)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if prefill_chunk is not None and (
            isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int)
            or prefill_chunk < 1
        ):  # fmt: skip
            raise ValueError(f"prefill_chunk must be a positive int or None, got {prefill_chunk!r}")
        self.model = model
        self.name = model.config.architecture if name is None else name
        self.partition = partition
        self.max_queue = max_queue
        # Paged decode attention has no sliding window: a context within the window is the
        # same computation, so a sliding-window model serves contexts up to its window.
        window = model.config.sliding_window
        self.max_model_len = min(model.max_seq_len, window or model.max_seq_len)
        network = model.decoder.model
        cfg = model.config
        per_block = block_bytes(cfg, network.dtype)
        num_blocks = _kv_budget(kv_memory, model.device) // per_block
        if num_blocks < 1:
            raise ValueError(
                f"kv_memory {kv_memory!r} holds no KV block of {BLOCK_SIZE} tokens "
                f"({per_block / 2**20:.2f} MiB each for this model); raise it"
            )
        with self._context():
            # One block more than the manager hands out: the scratch block that the padding
            # rows of a bucketed decode step write into.
            self.cache = PagedKVCache(cfg, num_blocks + 1, network.dtype)
        self.blocks = BlockManager(num_blocks, BLOCK_SIZE, prefix_caching=prefix_caching)
        self.planner = StepPlanner(
            self.blocks, max_batch=max_batch, max_batched_tokens=max_batched_tokens,
            prefill_chunk=prefill_chunk, whole_prompts=batch_invariant,
        )  # fmt: skip
        self.runner = ModelRunner(network, self.cache)
        self.batch_invariant = batch_invariant
        self.decode = DecodeGraphs(
            network, self.cache, num_blocks, use_graphs=cuda_graphs,
            batch_invariant=batch_invariant,
        )  # fmt: skip
        self.lookahead = lookahead
        #: Steps queued ahead on device-side ids (see the module's docstring).
        self.lookahead_steps = 0
        self._inflight: _Launched | None = None
        self.metrics = EngineMetrics()
        self.metrics.kv_blocks_total = num_blocks
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._incoming: list[Request] = []
        self._aborts: set[str] = set()
        self._requests: dict[str, Request] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Sampled tokens whose text is not made yet: (request, token, logprob, finish reason).
        self._pending: list[tuple[Request, int, TokenLogprob | None, str | None]] = []
        #: Called on the engine thread with the :class:`StepTimes` of every step that ran a
        #: forward pass (for profiling where a step's time goes); None: nothing is timed.
        self.step_observer: Callable[[StepTimes], None] | None = None
        #: Host turns shared with the process's other engines (:meth:`share_host`).
        self.host_priority: HostPriority | None = None
        self.protected = False
        self._waiting: SampledTokens | None = None  # a protected engine's step being waited on

    # --- submission (any thread) ----------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (None for a checkpoint without one)."""
        return self.model.tokenizer

    def prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids of ``prompt`` (text, or ids checked against the vocabulary)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer: give the prompt as token ids")
            return list(self.tokenizer.encode(prompt))
        ids = [int(t) for t in prompt]
        v = self.model.config.vocab_size
        bad = [t for t in ids if not 0 <= t < v]
        if bad:
            raise ValueError(f"token ids must be in [0, {v}), got {bad[0]}")
        return ids

    def check_prompt(self, ids: Sequence[int]) -> None:
        """Raise ``ValueError`` when a prompt of these ids can never run here."""
        if not ids:
            raise ValueError("the prompt is empty; give at least one token")
        if len(ids) >= self.max_model_len:
            raise ValueError(
                f"the prompt has {len(ids)} tokens; this model's context is "
                f"{self.max_model_len} tokens, and at least one must be left to generate"
            )
        cap = self.blocks.num_blocks * BLOCK_SIZE
        if len(ids) + 1 > cap:
            raise ValueError(
                f"the prompt has {len(ids)} tokens; the KV cache holds {cap}: shorten it or "
                "start the server with more --kv-memory"
            )

    def queue_length(self) -> int:
        """Requests submitted and not yet admitted into the running batch."""
        return len(self._incoming) + len(self.planner.waiting)

    def submit(
        self,
        prompt: str | Sequence[int],
        params: RequestParams,
        sink: Sink,
        *,
        request_id: str | None = None,
    ) -> str:
        """Queue a request; its outputs go to ``sink`` (called on the engine thread).

        Returns the request id. Raises ``ValueError`` for a prompt that cannot run,
        :class:`QueueFullError` when ``max_queue`` requests wait already, and
        :class:`EngineClosedError` after :meth:`shutdown`.
        """
        ids = self.prompt_ids(prompt)
        self.check_prompt(ids)
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer, and this model has none")
        rid = request_id or f"req-{next(_ids)}"
        with self._lock:
            if self._closed:
                raise EngineClosedError(f"the engine of {self.name!r} is shut down")
            if self.queue_length() >= self.max_queue:
                self.metrics.count_request("rejected")
                raise QueueFullError(
                    f"{self.queue_length()} requests are waiting for {self.name!r} (the most "
                    f"--max-queue allows); retry later"
                )
            request = Request(rid, ids, params, sink, self.model.eos_token_ids, self.tokenizer)
            self._incoming.append(request)
            self._wake.notify()
        return rid

    def abort(self, request_id: str) -> None:
        """Cancel a request at the next step: it ends with ``finish_reason="abort"``.

        Its blocks are freed then; a no-op for a request already finished.
        """
        with self._lock:
            self._aborts.add(request_id)
            self._wake.notify()

    # --- host turns (engines sharing a process) ------------------------------------------------

    def share_host(self, priority: HostPriority | None, *, protected: bool) -> None:
        """Take host turns with the process's other engines (:mod:`.host_priority`).

        ``protected``: this engine's host work goes first (a Guaranteed or Burstable model);
        otherwise this engine's thread yields to protected engines between its phases. None
        stops taking turns.
        """
        self.host_priority, self.protected = priority, protected and priority is not None
        if priority is not None and protected:
            priority.watch(self.host_due)

    def host_due(self) -> bool:
        """Whether the step this engine waits for is done on the device.

        Its thread then wants the interpreter lock back now. Any thread may ask.
        """
        waiting = self._waiting
        return waiting is not None and waiting.ready()

    def yield_host(self, max_wait_s: float | None = None) -> bool:
        """Let protected engines' host work go first; True when it waited.

        Called between phases of work done for this engine (its thread, its streams' writes);
        waits at most ``max_wait_s`` (default: the shared ``HostPriority``'s bound). A no-op
        for a protected engine or one that takes no turns.
        """
        priority = self.host_priority
        if priority is not None and not self.protected:
            return priority.yield_turn(max_wait_s)
        return False

    def _wait_for(self, pending: SampledTokens) -> tuple[list[int], list[TokenLogprob | None]]:
        """The step's sampled ids (its one host wait)."""
        priority = self.host_priority
        if priority is None:
            return pending.result()
        if not self.protected:
            result = pending.result()
            priority.yield_turn()
            return result
        self._waiting = pending
        try:
            with priority.paused():
                return pending.result()
        finally:
            self._waiting = None

    # --- the step (engine thread) ---------------------------------------------------------------

    def _context(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(gp.Device(self.model.device))
        if self.partition is not None:
            stack.enter_context(self.partition)
        return stack

    def has_work(self) -> bool:
        """Whether a request is queued, running or about to be cancelled."""
        return bool(
            self._incoming or self._aborts or self._pending or self._inflight is not None
            or self.planner.waiting or self.planner.running
        )  # fmt: skip

    def _emit(self, request: Request, output: RequestOutput) -> None:
        try:
            request.sink(output)
        except Exception:  # a consumer's failure must not stop the other requests
            log.exception("the sink of request %s failed", request.request_id)

    def _finish(self, request: Request, reason: str, text: str = "",
                error: str | None = None, tokens: Sequence[int] = (),
                logprobs: Sequence[TokenLogprob] = ()) -> None:  # fmt: skip
        self.planner.remove(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        self._requests.pop(request.request_id, None)
        self.metrics.count_request(reason)
        self._emit(request, RequestOutput(
            request.request_id, text, tuple(tokens), tuple(logprobs), reason,
            prompt_tokens=len(request.prompt_ids), completion_tokens=request.num_output,
            cached_tokens=request.cached_tokens, error=error,
        ))  # fmt: skip

    def _take_commands(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
            aborts, self._aborts = self._aborts, set()
        for r in incoming:
            self._requests[r.request_id] = r
            self.planner.waiting.append(r)
            self.metrics.prompt_tokens += len(r.prompt_ids)
        for rid in aborts:
            request = self._requests.get(rid)
            if request is not None:
                self._finish(request, "abort")

    def _update_gauges(self, plan: StepPlan | None) -> None:
        m = self.metrics
        with m.lock:
            m.queue_length = self.queue_length()
            m.running = len(self.planner.running)
            m.batch_tokens = sum(c.count for c in plan.chunks) if plan else 0
            m.kv_blocks_used = self.blocks.used
            m.kv_blocks_cached = self.blocks.cached

    def step(self) -> bool:
        """Run one step; False when there was nothing to run.

        The step is the one queued ahead by the previous call (lookahead), else one planned
        now; before waiting for its tokens, the next decode step may be queued behind it.
        """
        priority = self.host_priority
        if priority is None:
            return self._step()
        if self.protected:
            with priority.host_phase():
                return self._step()
        priority.yield_turn()
        return self._step()

    def _step(self) -> bool:
        start = time.perf_counter()
        self._take_commands()
        current, self._inflight = self._inflight, None
        m = self.metrics
        if current is None:
            plan = self.planner.plan()
            m.prefix_queried_blocks += plan.prefix_queried
            m.prefix_hit_blocks += plan.prefix_hit
            m.preemptions += len(plan.preempted)
            if not plan.chunks:
                worked = self._flush()
                self._finish_out_of_room(plan)
                self._update_gauges(None)
                return worked
            sampled = [c.request for c in plan.chunks if c.sample]
            try:
                with self._context():
                    launch = time.perf_counter()
                    pending = SampledTokens(self._logits(plan), sampled)
                    current = _Launched(plan, sampled, pending, time.perf_counter() - launch)
            except Exception as exc:  # fail this step's requests, keep serving the others
                self._fail(plan, exc)
                return True
        plan, sampled = current.plan, current.sampled
        try:
            following = self._queue_ahead(current) if self.lookahead else None
        except Exception as exc:  # its requests are this step's: fail them with it
            self._fail(plan, exc)
            return True
        enqueued = time.perf_counter()
        self.yield_host()
        self._flush()  # the previous step's text, while the GPU runs this one
        self._finish_out_of_room(plan)
        flushed = time.perf_counter()
        try:
            with self._context():
                tokens, logprobs = self._wait_for(current.pending)
        except Exception as exc:
            self._fail(plan, exc)
            return True
        sampled_at = time.perf_counter()
        self.planner.after_step(plan)
        now = time.perf_counter()
        accepted = self._accept_step(sampled, tokens, logprobs, now)
        m.record_step(accepted, now)
        self._update_gauges(plan)
        if self.step_observer is not None:
            decode_only = all(c.count == 1 for c in plan.chunks)
            end = time.perf_counter()
            times = StepTimes(start, enqueued, flushed, sampled_at, end, accepted, decode_only,
                              batch_tokens=sum(c.count for c in plan.chunks),
                              launch_s=current.launch_s)  # fmt: skip
            self.step_observer(times)
        self._inflight = following
        return True

    def _queue_ahead(self, current: _Launched) -> _Launched | None:
        """Queue the step after ``current`` on its device-side ids; None when it can't.

        Every request of ``current`` that its sampled token cannot end by length decodes one
        more token; the ids come from ``current``'s sampler on the GPU. Waiting requests are
        admitted beside those rows (prompt chunks within the step's budget and prefill cap,
        decode rows first): the step then replays a mixed step's graph, or runs the flattened
        path when it is too large for one. A mixed shape not captured yet gives its admissions
        back (None): the step planned from the host next captures it. Blocks a position needs
        are taken now (never by preemption: without free blocks, None).
        """
        chunks = current.plan.chunks
        if current.plan.preempted or current.plan.out_of_room or self._aborts:
            return None
        if self.batch_invariant and (
            self.planner.waiting
            or self._incoming
            or not self.decode.takes_device_ids(chunks)
            or not all(c.sample for c in chunks)
        ):  # its prompts are planned whole from the host
            return None
        bs = self.cache.block_size
        rows: list[int] = []  # of the decode rows' ids among `current`'s sampled ids
        ahead: list[ScheduledChunk] = []
        prompts: list[tuple[Request, int]] = []  # prompts left half done, their next token
        grow: list[Request] = []
        running = set(self.planner.running)
        sampled_before = 0
        for c in chunks:
            r = c.request
            j, sampled_before = sampled_before, sampled_before + c.sample
            if r not in running:
                continue  # ended (EOS, stop string, abort): its text may still be on its way
            if r.params.logprobs is not None or r.params.sampling.repetition_penalty != 1:
                return None  # these read the host's tokens or logits
            position = c.start + c.count  # of the token `current` samples
            if not c.sample:  # its next prompt chunk (known tokens) goes on below
                prompts.append((r, position))
                continue
            if len(r.tokens) != position:
                return None
            if r.num_output + 1 >= r.params.max_tokens or position + 1 >= self.max_model_len:
                continue  # that token is its last
            if len(r.blocks) * bs < position + 1:
                grow.append(r)
            rows.append(j)
            ahead.append(ScheduledChunk(r, position, 1, sample=True))
        admitting = bool(self.planner.waiting) and not self.batch_invariant
        if not (ahead or admitting or prompts) or len(grow) > self.blocks.available:
            return None
        if not (admitting or prompts) and not self.decode.captured(ahead, grow):
            return None
        for r in grow:
            r.blocks.append(self.blocks.allocate())
        going_on = self.planner.continue_prompts(len(ahead), prompts) if prompts else []
        if going_on is None:
            return None  # too few free blocks: the host plans the next step (it may preempt)
        prompt_tokens = sum(c.count for c in going_on)
        plan = self.planner.plan_admissions(len(ahead), prompt_tokens) if admitting else StepPlan()
        admitted = list(plan.chunks)
        # Decode rows first (their ids are the first rows' ids), then prompts going on, then
        # the admitted ones.
        plan.chunks[:0] = ahead + going_on
        if not plan.chunks:
            return None  # nothing admitted after all (a full batch, too few blocks)
        graph = self.decode.accepts(plan.chunks)
        if graph and not self.decode.captured(plan.chunks):
            # A shape is captured on a step planned from the host (never while a step is
            # queued ahead): give the admissions back, that step makes them again.
            self.planner.unadmit(admitted)
            return None
        self.metrics.prefix_queried_blocks += plan.prefix_queried
        self.metrics.prefix_hit_blocks += plan.prefix_hit
        self.yield_host()
        with self._context():
            launch = time.perf_counter()
            ids = current.pending.ids if ahead else None
            if ids is not None and rows != list(range(len(current.sampled))):
                # "clip": valid by construction, and a raising take reads its indices back
                ids = gp.take(ids, upload(np.asarray(rows, np.int32)), axis=0, mode="clip")
            if graph:
                logits = self.decode.logits(plan.chunks, token_ids=ids, capture=False)
                logits = self._sampled_rows(plan.chunks, logits)
            else:
                inputs = build_inputs(plan.chunks, BLOCK_SIZE)
                logits = self.runner.logits(inputs, token_ids=ids)
            sampled = [c.request for c in plan.chunks if c.sample]
            pending = SampledTokens(logits, sampled)
            launched = _Launched(plan, sampled, pending, time.perf_counter() - launch)
        self.lookahead_steps += 1
        return launched

    def _fail(self, plan: StepPlan, exc: Exception) -> None:
        log.exception("an engine step failed")
        self._inflight = None  # queued ahead of the failed step: its requests are failed here
        self._flush()
        for c in plan.chunks:
            if c.request.status is RequestStatus.RUNNING:
                self._finish(c.request, "error", error=f"{type(exc).__name__}: {exc}")
        self._update_gauges(None)

    def _finish_out_of_room(self, plan: StepPlan) -> None:
        for request in plan.out_of_room:  # after _flush: their text is complete
            if request.status is not RequestStatus.FINISHED:
                self._finish(request, "length", request.final_text_at_limit())

    def _logits(self, plan: StepPlan) -> gp.GPUArray:
        """float32 logits of the step's sampled rows, in chunk order.

        Decode-only steps and mixed steps within the row buckets go through the bucketed
        (graph-replayed) path; larger steps through the flattened one.
        """
        chunks = plan.chunks
        if self.batch_invariant:
            return invariant_step_logits(chunks, self.decode, self.runner, BLOCK_SIZE)
        if not self.decode.accepts(chunks):
            return self.runner.logits(build_inputs(chunks, BLOCK_SIZE))
        return self._sampled_rows(chunks, self.decode.logits(chunks))

    @staticmethod
    def _sampled_rows(chunks: Sequence[ScheduledChunk], logits: gp.GPUArray) -> gp.GPUArray:
        """The rows of ``logits`` (one per chunk) of the chunks that sample, in chunk order."""
        rows = [i for i, c in enumerate(chunks) if c.sample]
        if len(rows) == len(chunks):
            return logits
        # "clip": valid by construction, and a raising take reads its indices back
        return gp.take(logits, upload(np.asarray(rows, np.int32)), axis=0, mode="clip")

    def _accept_step(
        self, sampled: Sequence[Request], tokens: Sequence[int],
        logprobs: Sequence[TokenLogprob | None], now: float,
    ) -> int:  # fmt: skip
        """Record a step's sampled ids (their text comes at the next :meth:`_flush`); how many.

        A request that ends here (EOS id, length) leaves the batch now, its blocks freed. A
        request that ended meanwhile (an EOS id or a stop string while this step was queued
        ahead, an abort) gets nothing and is not counted. One pass over the step's requests,
        the latency histograms updated under one lock acquisition.
        """
        running = RequestStatus.RUNNING
        limit = self.max_model_len
        pending = self._pending
        ended: list[Request] = []
        first: list[float] = []
        gaps: list[float] = []
        accepted = 0
        for i, (r, token, lp) in enumerate(zip(sampled, tokens, logprobs, strict=True)):
            if i % 16 == 15:
                self.yield_host()
            if r.status is not running:  # ended by a stop string or an abort meanwhile
                continue
            reason = r.add(token)
            if reason is None and len(r.tokens) >= limit:
                reason = "length"
            if r.first_token_at is None:
                r.first_token_at = now
                first.append(now - r.arrival)
            elif r.last_token_at is not None:
                gaps.append(now - r.last_token_at)
            r.last_token_at = now
            if reason is not None:
                ended.append(r)
            pending.append((r, token, lp, reason))
            accepted += 1
        m = self.metrics
        with m.lock:
            for value in first:
                m.ttft.observe(value)
            for value in gaps:
                m.itl.observe(value)
        for r in ended:
            self.planner.remove(r)
        return accepted

    def _flush(self) -> bool:
        """Make the text of the recorded tokens and hand it out; False when there was none."""
        pending, self._pending = self._pending, []
        for i, (r, token, lp, reason) in enumerate(pending):
            if i % 16 == 15:
                self.yield_host()
            if r.status is RequestStatus.FINISHED:  # aborted since
                continue
            text, reason = r.text_of(token, reason)
            lps = (lp,) if lp is not None else ()
            if reason is not None:
                self._finish(r, reason, text, tokens=(token,), logprobs=lps)
            else:
                self._emit(r, RequestOutput(r.request_id, text, (token,), lps))
        return bool(pending)

    # --- the engine thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"pygpukit-engine-{self.name}", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self.has_work():
                    self._wake.wait()
                if self._closed:
                    break
            try:
                self.step()
            except Exception:
                log.exception("the engine loop failed a step")
        self._drain()

    def _drain(self) -> None:
        """Abort everything still queued or running (after shutdown)."""
        self._inflight = None  # its tokens are nobody's now
        self._flush()
        self._take_commands()
        for request in list(self._requests.values()):
            self._finish(request, "abort")

    def shutdown(self, *, wait_for_requests: float = 0.0) -> None:
        """Stop taking requests and stop the engine thread.

        Running and queued requests get up to ``wait_for_requests`` seconds to finish; what is
        left then ends with ``finish_reason="abort"``.
        """
        with self._lock:
            self._closed = True if wait_for_requests <= 0 else self._closed
        deadline = time.monotonic() + wait_for_requests
        while wait_for_requests > 0 and time.monotonic() < deadline and self.has_work():
            if self._thread is None:
                self.step()
            else:
                time.sleep(0.01)
        with self._lock:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        else:
            self._drain()

    # --- convenience ----------------------------------------------------------------------------

    def run(self, prompt: str | Sequence[int], params: RequestParams) -> Iterator[RequestOutput]:
        """Submit one request and yield its outputs.

        Steps the engine here when no engine thread runs (other submitted requests advance
        with it).
        """
        outputs = _Collected(self._wake)
        self.submit(prompt, params, outputs.sink)
        seen = 0
        while True:
            self._advance(functools.partial(outputs.has_more_than, seen))
            with self._lock:
                new, seen = outputs.items[seen:], len(outputs.items)
                finished = outputs.finished
            yield from new
            if finished and seen == len(outputs.items):
                return

    def _advance(self, ready: Callable[[], bool]) -> None:
        """One turn of a caller waiting for its requests' outputs.

        Steps the engine here when no engine thread runs; else waits (at most 0.1 s) for the
        engine thread's next notification, unless ``ready()`` (called under the engine's lock)
        says what the caller waits for has come already.
        """
        if self._thread is None:
            self.step()
            return
        with self._lock:
            if not ready():
                self._wake.wait(0.1)

    def generate(self, prompt: str | Sequence[int], params: RequestParams) -> RequestOutput:
        """Run one request to its end; one output with all its text, tokens and logprobs."""
        parts = list(self.run(prompt, params))
        last = parts[-1]
        return RequestOutput(
            last.request_id,
            "".join(p.text for p in parts),
            tuple(t for p in parts for t in p.token_ids),
            tuple(lp for p in parts for lp in p.logprobs),
            last.finish_reason,
            last.prompt_tokens,
            last.completion_tokens,
            last.cached_tokens,
            last.error,
        )

    def warm_up_prefill(self, seed: int = 0) -> None:
        """Run one prefill step of each power-of-two token count up to ``max_batched_tokens``.

        The GEMMs of a prefill step are planned per row count, and cuBLASLt's algorithm is
        timed once per power-of-two bucket of rows, on first use: for an 8B model about 100 ms
        a new bucket, which the first clients of a server would otherwise wait for. The prompts
        are random (no prefix-cache hits) and make one token each; their blocks go back to the
        pool when they end. Token counts that need more prompts than ``max_batch`` or
        ``max_queue`` allow are skipped.
        """
        rng = np.random.default_rng(seed)
        vocab = self.model.config.vocab_size
        budget = self.planner.max_batched_tokens
        longest = max(1, min(self.max_model_len - 1, budget))
        params = RequestParams(max_tokens=1)  # one step each: its prompt
        count = 1
        while count <= budget:
            lengths = [longest] * (count // longest) + (
                [count % longest] if count % longest else []
            )
            if len(lengths) > min(self.max_queue, self.planner.max_batch):
                break  # no step of this many tokens can happen here
            self._run_all([rng.integers(1, vocab, n).tolist() for n in lengths], params)
            count *= 2

    def _run_all(self, prompts: Sequence[Sequence[int]], params: RequestParams) -> None:
        """Submit every prompt at once and return when all have finished."""
        outputs = _Collected(self._wake)
        for prompt in prompts:
            self.submit(prompt, params, outputs.sink)
        while outputs.finished < len(prompts):
            self._advance(functools.partial(outputs.has_finished, len(prompts)))

    def stats(self) -> dict[str, int]:
        """Block and request counts now (for tests and /health)."""
        return {
            "kv_blocks_total": self.blocks.num_blocks,
            "kv_blocks_used": self.blocks.used,
            "kv_blocks_cached": self.blocks.cached,
            "waiting": self.queue_length(),
            "running": len(self.planner.running),
        }
