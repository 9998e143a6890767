"""Stand-ins for the Ascend stack where no card and no CANN exist (stdlib and torch only: no kit
imports).

``simulated_npu``: device ``npu:0`` on CPU storage and a ``torch_npu`` whose
``npu_fusion_attention`` is a CPU reference held to the real op's rules; ``torch_npu_schema``: its
signature against the pinned wheel's schema.
"""
