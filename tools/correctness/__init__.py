"""Is the candidate's output the reference's function? Comparison (chunked, on the device
that holds the tensors), the dtype tolerances, and the varied inputs that keep a kernel
from passing on one input distribution only."""
