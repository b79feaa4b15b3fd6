"""pygpukit.ops: the transformer ops of the model engines, GPUArray in, GPUArray out.

Distributed as ``pygpukit-ops``. Each op launches a built-in kernel (``kernels/*.cu``,
shipped as per-SM cubins in ``_kernels/``) on the current stream and returns without
waiting; on the CPU backend the same call runs a NumPy version. Families:

- :mod:`.normalization`: rmsnorm, layernorm and their fused residual-add forms;
- :mod:`.rope`: rotary position embeddings (NeoX and GPT-J layouts); :mod:`.rope_paged`: a
  batched decode step's q/k/v split, RoPE and paged KV write in one launch;
- :mod:`.rope_scaling`: long-context RoPE frequencies (linear, llama3, yarn);
- :mod:`.conv`: 1-D convolution and transposed convolution (stride, padding, dilation,
  groups, depthwise) over ``[B, C, L]`` signals;
- :mod:`.channels`: instance norm / AdaIN, LayerNorm over channels, Snake, LeakyReLU;
- :mod:`.recurrent`: LSTM and bidirectional LSTM over a sequence (PyTorch's layout);
- :mod:`.activations`: gated activations (SwiGLU, GeGLU), embedding lookup, row softmax;
- :mod:`.attention`: flash attention for prefill, decode attention over a KV cache;
- :mod:`.kv_cache`: writes into contiguous and paged KV caches;
- :mod:`.linear`: GEMV / skinny GEMM and linear layers with fused epilogues;
  :mod:`.skinny_linear`: 1 to 64 rows of x on tensor cores at the weights' streaming rate;
- :mod:`.decode_linear`: a one-token decode layer's GEMVs with RMSNorm, residual, SwiGLU and
  RoPE + KV-cache writes fused in; :mod:`.decode_state`: a decode step's bookkeeping;
  :mod:`.decode_head`: a greedy step's head GEMV, argmax and bookkeeping in one launch;
  :mod:`.decode_attention_single`: one-launch decode attention over short caches;
- :mod:`.sampling`: token sampling on the GPU;
- :mod:`.quantization`: GGUF tensor types (Q8_0, Q4_0, Q4_1, ...) dequantized on the device;
- :mod:`.audio`: STFT / inverse STFT for any n_fft, mel filterbanks and spectrograms,
  Whisper's log-mel frontend, MFCCs, resampling, YIN pitch, onsets, ``load_audio``;
- :mod:`.layers`: the same ops as stateful layers (weights + launch plans made once) for
  model code: ``Linear``, ``RMSNorm``, ``LayerNorm``, ``Rotary``, ``Attention``, ``GatedMLP``,
  ``Embedding``;
- :mod:`.config`: the tuning knobs, read from the environment once.

Each call plans its launch once per shape bucket and then only looks the plan up; the NumPy
versions (:mod:`.reference`) run on the CPU backend.

Guides: docs/ops-audio.md, docs/ops-layers.md, docs/ops-attention.md, docs/ops-linear-sampling.md,
docs/ops-signal.md.
"""

from . import (
    activations,
    attention,
    audio,
    channels,
    config,
    conv,
    decode_attention_single,
    decode_head,
    decode_linear,
    decode_rows,
    decode_state,
    kv_cache,
    layers,
    linear,
    normalization,
    quantization,
    recurrent,
    rope,
    rope_paged,
    rope_scaling,
    sampling,
    skinny_linear,
)

# Collected before the star imports: they bind the function linear() over the module of
# that name (ops.linear is the function; the module is pygpukit.ops.linear).
__all__ = [
    "config",
    "layers",
    "audio",
    *activations.__all__,
    *audio.__all__,
    *attention.__all__,
    *channels.__all__,
    *conv.__all__,
    *decode_attention_single.__all__,
    *decode_head.__all__,
    *decode_linear.__all__,
    *decode_rows.__all__,
    *decode_state.__all__,
    *kv_cache.__all__,
    *linear.__all__,
    *normalization.__all__,
    *quantization.__all__,
    *recurrent.__all__,
    *rope.__all__,
    *rope_paged.__all__,
    *rope_scaling.__all__,
    *sampling.__all__,
    *skinny_linear.__all__,
]

from .activations import *  # noqa: F403
from .attention import *  # noqa: F403
from .audio import *  # noqa: F403
from .channels import *  # noqa: F403
from .conv import *  # noqa: F403
from .decode_attention_single import *  # type: ignore[no-redef]  # noqa: F403
from .decode_head import *  # noqa: F403
from .decode_linear import *  # type: ignore[no-redef]  # noqa: F403
from .decode_rows import *  # noqa: F403
from .decode_state import *  # noqa: F403
from .kv_cache import *  # noqa: F403
from .linear import *  # type: ignore[no-redef]  # noqa: F403
from .normalization import *  # noqa: F403
from .quantization import *  # noqa: F403
from .recurrent import *  # noqa: F403
from .rope import *  # noqa: F403
from .rope_paged import *  # noqa: F403
from .rope_scaling import *  # noqa: F403
from .sampling import *  # noqa: F403
from .skinny_linear import *  # type: ignore[no-redef]  # noqa: F403
