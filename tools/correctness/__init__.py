"""[any] Is the candidate's output the reference's function? Comparison (chunked, on the device
that holds the tensors), the dtype tolerances, the gradients under --backward, and the varied inputs
that keep a kernel from passing on one input distribution only. Called in the reference worker; the
stage is ``kernelfix.tools.stages.correctness``."""
