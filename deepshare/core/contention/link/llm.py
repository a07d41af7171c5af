"""LLM-era job classes: link parameters derived from model size, batch, precision and parallelism.

The six measured models are a 2019 testbed's; the classes here are today's (Llama 3, Mixtral,
GPT-3, a ViT), and their link-model parameters (:class:`~deepshare.core.contention.link.params.
LinkParams`) are derived, not fitted. Notation: ``P`` parameters, ``P_a`` parameters active per
token (``P`` for a dense model), ``t`` tokens per GPU per iteration (the global batch's tokens
over the job's GPUs), ``b`` bytes per value (2 for BF16), ``h`` hidden size, ``L`` layers, ``TP``
/ ``PP`` / ``EP`` the tensor-, pipeline- and expert-parallel degrees, ``G = 8`` GPUs per node
(one node holds one TP group and one pipeline stage: ``TP <= 8``).

Per node and iteration, the bytes a node's NICs send (the large-ring limit; the link model
multiplies the NIC work by ``(k - 1) / k`` of it for ``k`` nodes, through its ring factor
``2(k - 1)/k`` applied to half of this volume):

* **data-parallel gradients** (ring all-reduce): each GPU's gradient shard is ``P b / (TP PP)``;
  a node's TP ranks together hold ``P_n b`` with ``P_n = (P - P_e + P_e / EP) / PP`` (``P_e`` the
  expert parameters, split over the ``EP`` expert-parallel ranks), and all-reduce moves twice
  that through each node: ``V_dp = 2 P_n b``.
* **FSDP / ZeRO-3**: all-gather of the parameters in the forward and again in the backward pass,
  reduce-scatter of the gradients: ``V = 3 P_n b``, 1.5 x the all-reduce volume.
* **MoE expert-parallel all-to-all** across nodes: every token goes to ``top_k`` experts and
  comes back (dispatch + combine), in the forward and the backward pass, in each of ``L_moe``
  MoE layers: ``V_a2a = G t top_k h b x 2 x 2 x L_moe``. The expert-parallel group spans nodes,
  so in the large-group limit all of it leaves the node (the ``1 / EP`` kept local is ignored).
* **pipeline point-to-point**: a stage sends its activations forward and receives their
  gradients backward: ``V_pp = 2 G t (PP - 1) h b`` (per node, the first and last stages'
  missing neighbours averaged in).
* **tensor parallelism** stays inside the node (Megatron-LM with sequence parallelism: per
  layer, two all-gathers and two reduce-scatters forward and as many backward, ``(TP - 1)/TP``
  of the stage's tokens each): per GPU ``V_tp = 8 (TP - 1) t h b L``. With the data-parallel or
  FSDP ring's own intra-node hops (each GPU forwards its ring's volume, ``V_dp / TP`` per GPU),
  this is the class's intra-node work (``pcie_s``), which rides private NVLink on NVLink nodes.

Link-model parameters (``eff`` = :data:`params.LINE_RATE_EFFICIENCY`, the reference NIC 40 Gb/s
and intra-node fabric 256 Gb/s of :mod:`params`):

* ``nic_s = (V_dp or V_fsdp + V_a2a + V_pp) / 2 x 8 / (40e9 eff)`` (the model's NIC work is
  ``nic_s x 2(k - 1)/k``, scaled by ``40 / nic_gbps``);
* ``all_to_all_s = V_a2a / 2 x 8 / (40e9 eff)``: the all-to-all part of ``nic_s``. The NIC work
  does not depend on it; a fabric uplink does: a ring crosses a domain's boundary with one node's
  volume, an all-to-all with every node's traffic to the nodes outside the domain
  (:mod:`deepshare.core.contention.link.model`);
* ``pcie_s = V_intra x 8 / (256e9 eff x 2 (G - 1))``: the link model charges ``2 (g - 1)``
  intra-node ring units for ``g`` GPUs on a node and converts them to NVLink time with the
  node's per-GPU ``nvlink_gbps``, so on a full NVLink node the private time is
  ``V_intra x 8 / (nvlink eff)``, one GPU's volume over its own NVLink bandwidth. On PCIe nodes
  the same work is charged to the node's shared PCIe fabric (an approximation: these classes
  are meant for NVLink nodes);
* ``compute_s = 6 P_a t / F_ref`` with ``F_ref`` the TITAN Xp's achieved FLOP/s of the
  hardware table (:data:`deepshare.core.hardware.REFERENCE`): the link model divides it by the
  node GPU's speed, so on an H100 it is ``6 P_a t / (989 TFLOPS x 0.40)`` (Llama-3-8B at 8,192
  tokens per GPU: 1.0 s). Only the parameter FLOPs count (attention's are left out);
* ``pcie_coupling = 40 / 256``: with GPUDirect RDMA each NIC byte crosses the node's PCIe fabric
  once, GPU -> switch -> NIC; the fitted models' coupling (about 1) described NCCL over sockets,
  which copies through host memory;
* ``overlap``: per class, taken from the measured model whose communication pattern it shares
  (fitted FSDP 0.83, MoE 0.31, Transformer-XL's data-parallel 0.74), and stated on each class;
* ``latency_s``: per extra node, ``collectives per iteration x 2 x 10 us`` (an InfiniBand/RoCE
  NCCL hop; assumption); ``congestion``: the fitted models' median, as for the common models;
  the placement-shape exponents 0 (the formulas above give the shape).

Isolated throughput scaling across node counts still comes from the proxy's measured profile
in the workload catalog (:data:`deepshare.core.workloads.DERIVED_CLASSES`): these parameters set
how the classes contend, not the simulator's throughput source.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepshare.core.errors import DeepShareError
from deepshare.core.hardware import REFERENCE

GPUS_PER_NODE = 8
"""GPUs of the node a class is laid out on (one TP group and one pipeline stage per node)."""
HOP_LATENCY_S = 10e-6
"""One NCCL hop over InfiniBand / RoCE (assumption: a few microseconds of wire and switch
latency plus the proxy thread's; NCCL's own tuning model uses microseconds per hop)."""
SHARDINGS = ("dp", "fsdp")


@dataclass(frozen=True)
class LlmClass:
    """One job class (see the module doc for the formulas)."""

    params_b: float
    """Parameters, billions."""
    hidden: int
    layers: int
    tokens_per_gpu: float
    """Tokens per GPU per iteration (images x patches for a vision transformer)."""
    overlap: float
    source: str
    """Where the sizes, batch and layout come from."""
    active_params_b: float = 0.0
    """Parameters active per token, billions (0: all of them, a dense model)."""
    expert_params_b: float = 0.0
    """Parameters in the experts, billions (split over ``ep`` ranks)."""
    bytes_per_value: float = 2.0
    tp: int = 1
    pp: int = 1
    ep: int = 1
    sharding: str = "dp"
    """``dp``: gradient all-reduce; ``fsdp``: ZeRO-3 all-gather + reduce-scatter."""
    moe_layers: int = 0
    top_k: int = 0
    collectives_per_layer: int = 1
    """Inter-node collectives per layer and iteration (for ``latency_s``)."""

    def __post_init__(self) -> None:
        for name in ("params_b", "hidden", "layers", "tokens_per_gpu", "bytes_per_value", "tp", "pp", "ep"):
            value = getattr(self, name)
            if not value > 0:
                raise DeepShareError(f"LLM class field {name}: expected a positive number, got {value!r}")
        if self.tp > GPUS_PER_NODE or GPUS_PER_NODE % self.tp:
            raise DeepShareError(f"LLM class field tp: expected a divisor of {GPUS_PER_NODE}, got {self.tp}")
        if self.sharding not in SHARDINGS:
            raise DeepShareError(f"LLM class field sharding: expected one of {SHARDINGS}, got {self.sharding!r}")
        if not 0 <= self.overlap <= 1:
            raise DeepShareError(f"LLM class field overlap: expected a number in [0, 1], got {self.overlap}")
        if not 0 <= self.expert_params_b <= self.params_b:
            raise DeepShareError("LLM class field expert_params_b: expected 0..params_b")
        if (self.moe_layers > 0) != (self.top_k > 0):
            raise DeepShareError("LLM class fields moe_layers and top_k: give both (an MoE model) or neither")

    # -- volumes, bytes per iteration ---------------------------------------------------------
    @property
    def node_params(self) -> float:
        """``P_n``: parameters one node's GPUs hold (one pipeline stage, its experts)."""
        p, pe = self.params_b * 1e9, self.expert_params_b * 1e9
        return (p - pe + pe / self.ep) / self.pp

    def gradient_bytes(self) -> float:
        """``V_dp`` or ``V_fsdp``: the node's data-parallel bytes (large-ring limit)."""
        return (3.0 if self.sharding == "fsdp" else 2.0) * self.node_params * self.bytes_per_value

    def all_to_all_bytes(self) -> float:
        """``V_a2a``: the node's expert-parallel all-to-all bytes."""
        return GPUS_PER_NODE * self.tokens_per_gpu * self.top_k * self.hidden * self.bytes_per_value * 4 * self.moe_layers

    def pipeline_bytes(self) -> float:
        """``V_pp``: the node's pipeline point-to-point bytes."""
        return 2.0 * GPUS_PER_NODE * self.tokens_per_gpu * (self.pp - 1) * self.hidden * self.bytes_per_value

    def tensor_bytes_per_gpu(self) -> float:
        """``V_tp``: one GPU's tensor-parallel bytes (inside the node)."""
        return 8.0 * (self.tp - 1) * self.tokens_per_gpu * self.hidden * self.bytes_per_value * self.layers

    def inter_node_bytes(self) -> float:
        return self.gradient_bytes() + self.all_to_all_bytes() + self.pipeline_bytes()

    def intra_node_bytes_per_gpu(self) -> float:
        return self.tensor_bytes_per_gpu() + self.gradient_bytes() / self.tp

    def flops_per_gpu(self) -> float:
        """``6 P_a t``: training FLOPs per GPU and iteration."""
        active = (self.active_params_b or self.params_b) * 1e9
        return 6.0 * active * self.tokens_per_gpu


def derive(c: LlmClass, ref_nic_gbps: float, ref_pcie_gbps: float, efficiency: float,
           congestion: float) -> dict[str, float]:
    """The link-model parameters of class ``c`` as ``LinkParams`` keyword arguments.

    The reference bandwidths and the efficiency are :mod:`params`' (passed in, so this module
    does not import the catalog that registers it)."""
    collectives = c.collectives_per_layer * c.layers / c.pp
    return {
        "compute_s": c.flops_per_gpu() / (REFERENCE.achieved_tflops * 1e12),
        "nic_s": c.inter_node_bytes() / 2.0 * 8.0 / (ref_nic_gbps * 1e9 * efficiency),
        "all_to_all_s": c.all_to_all_bytes() / 2.0 * 8.0 / (ref_nic_gbps * 1e9 * efficiency),
        "pcie_s": c.intra_node_bytes_per_gpu() * 8.0 / (ref_pcie_gbps * 1e9 * efficiency * 2 * (GPUS_PER_NODE - 1)),
        "overlap": c.overlap,
        "samples_per_gpu": c.tokens_per_gpu,
        "latency_s": collectives * 2.0 * HOP_LATENCY_S,
        "pcie_coupling": ref_nic_gbps / ref_pcie_gbps,
        "congestion": congestion,
        "nodes_exponent": 0.0,
        "gpus_per_node_exponent": 0.0,
    }


LLM_CLASSES: dict[str, LlmClass] = {
    "llama3-8b": LlmClass(
        params_b=8.03, hidden=4096, layers=32, tokens_per_gpu=8192, overlap=0.83, sharding="fsdp",
        collectives_per_layer=3,
        source="Llama 3 (Meta 2024): 8.03B parameters, 32 layers, hidden 4096, 8K context; one "
               "8,192-token sequence per GPU per step, FSDP (full sharding) as in torchtitan's "
               "Llama 3 8B recipe; overlap: the fitted FSDP model's"),
    "llama3-70b": LlmClass(
        params_b=70.6, hidden=8192, layers=80, tokens_per_gpu=1024, overlap=0.74, tp=8, pp=4,
        collectives_per_layer=1,
        source="Llama 3 (Meta 2024): 70.6B parameters, 80 layers, hidden 8192; 16M-token batches "
               "on 16K GPUs = 1,024 tokens per GPU (the paper's 405B setting); TP 8 x PP 4 x DP "
               "(layout: assumption); overlap: the fitted data-parallel Transformer-XL's"),
    "mixtral-8x7b": LlmClass(
        params_b=46.7, active_params_b=12.9, expert_params_b=45.1, hidden=4096, layers=32,
        tokens_per_gpu=4096, overlap=0.31, tp=8, ep=8, moe_layers=32, top_k=2, collectives_per_layer=5,
        source="Mixtral of Experts (Mistral AI 2024): 46.7B parameters, 12.9B active, 8 experts "
               "top-2 in all 32 layers, hidden 4096 (experts 32 x 8 x 3 x 4096 x 14336 = 45.1B); "
               "4,096 tokens per GPU; TP 8 inside a node, EP 8 across nodes (Megatron-Core forms "
               "expert groups across data-parallel ranks when TP fills the node; layout: "
               "assumption); overlap: the fitted MoE model's"),
    "gpt3-175b": LlmClass(
        params_b=175.0, hidden=12288, layers=96, tokens_per_gpu=1024, overlap=0.74, tp=8, pp=8,
        collectives_per_layer=1,
        source="GPT-3 (Brown et al. 2020): 175B parameters, 96 layers, hidden 12288; MLPerf "
               "Training GPT-3 global batch 1,536 x 2,048 tokens on 3,072 GPUs = 1,024 per GPU; "
               "TP 8 x PP 8 x DP as in MLPerf submissions; overlap: the fitted data-parallel "
               "Transformer-XL's"),
    "vit-h14": LlmClass(
        params_b=0.632, hidden=1280, layers=32, tokens_per_gpu=64 * 257, overlap=0.74,
        collectives_per_layer=1,
        source="ViT-H/14 (Dosovitskiy et al. 2021): 632M parameters, 32 layers, hidden 1280, 257 "
               "tokens per 224 px image; 64 images per GPU (assumption), data parallel; overlap: "
               "the fitted data-parallel Transformer-XL's"),
}
"""Class name -> its description. Names are how traces and mixes call them."""
