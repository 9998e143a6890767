"""Stand-ins for the Ascend stack that the npu test leg uses where no card and no CANN exist.

``simulated_npu``: device ``npu:0`` backed by CPU storage, and a ``torch_npu`` module whose
``npu_fusion_attention`` is a CPU reference held to the real operator's rules.
``torch_npu_schema``: checks that stand-in's signature against the schema in the pinned
torch_npu wheel (read as text; the wheel is never imported).

Imported as ``npu_standin`` inside a leg (tests/regression is on ``sys.path`` there), never
under a name the vllm-omni tree also uses. Standard library and torch only: no kit imports.
"""
