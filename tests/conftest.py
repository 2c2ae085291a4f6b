import torch

# Tiny models: intra-op threads only add contention on the 2-core machines this suite runs on.
torch.set_num_threads(1)
