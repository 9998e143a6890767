"""npu-smi's table as a host with two 910B1 cards prints it (card 1 busy), and as a pod given two of a host's
cards prints it: the cards check's input in test_e2e_units and the Ascend CI agent's stub in test_ascend_ci."""

NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.0                   Version: 24.1.0                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B1               | OK            | 93.5        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3392 / 65536         |
+===========================+===============+====================================================+
| 1     910B1               | OK            | 90.1        35                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3390 / 65536         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
| 1       0                 | 424242        | python3                  | 51234                   |
+===========================+===============+====================================================+
"""
# What a pod given two of a host's cards sees: npu-smi lists the host's ids 4 and 5.
POD_NPU_SMI = NPU_SMI.replace("| 0     910B1", "| 4     910B1").replace("| 1     910B1", "| 5     910B1")
POD_NPU_SMI = POD_NPU_SMI.replace("| 1       0                 | 424242", "| 5       0                 | 424242")
