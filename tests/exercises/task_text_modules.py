"""Module answers written from the exercise notebooks' task text alone, and nothing more.

Each is right by every word of its task (torch's constructor, parameter names and shapes, initial
values, the math, half precision for RMSNorm), and makes every choice the task leaves open in its
own way: how to store the constructor's arguments, what to name them, which attributes to keep.
Each must earn every point of its test cell (tests/exercises/test_mutants.py).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskTextModule:
    """One answer cell: the assignment, the grade_id of its module cell, the cell's source."""

    name: str
    assignment: str
    cell: str
    source: str


LAYER_NORM_INT_SHAPE = '''
class LayerNorm(nn.Module):
    """normalized_shape kept as given: an int stays an int."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape = normalized_shape
        self.eps = eps
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.weight = nn.Parameter(torch.ones(shape)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.zeros(shape)) if elementwise_affine and bias else None

    def forward(self, x):
        n = 1 if isinstance(self.normalized_shape, int) else len(self.normalized_shape)
        dims = tuple(range(x.dim() - n, x.dim()))
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xf.mean(dim=dims, keepdim=True)
        var = ((xf - mean) ** 2).mean(dim=dims, keepdim=True)
        y = (xf - mean) / torch.sqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)
'''

LAYER_NORM_HF_NAMES = '''
class LayerNorm(nn.Module):
    """Hugging Face's names: eps kept as variance_epsilon, the shape as `shape`."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        self.shape = list(normalized_shape)
        self.variance_epsilon = eps
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.shape))
            if bias:
                self.bias = nn.Parameter(torch.zeros(self.shape))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        if input_dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(torch.float32)
        dims = [-i for i in range(1, len(self.shape) + 1)]
        mean = hidden_states.mean(dims, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(dims, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight is not None:
            hidden_states = self.weight * hidden_states
        if self.bias is not None:
            hidden_states = hidden_states + self.bias
        return hidden_states.to(input_dtype)
'''

LAYER_NORM_NO_ATTRIBUTES = '''
class LayerNorm(nn.Module):
    """Nothing kept but the parameters and one private tuple."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        shape = torch.Size(normalized_shape)
        self._how = (len(shape), eps)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(shape))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = nn.Parameter(torch.zeros(shape))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        n, eps = self._how
        xc = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
        flat = xc.reshape(*x.shape[: x.dim() - n], -1)
        centered = flat - flat.mean(-1, keepdim=True)
        y = (centered / (centered.square().mean(-1, keepdim=True) + eps).sqrt()).reshape(x.shape)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)
'''

RMS_NORM_INT_SHAPE = '''
class RMSNorm(nn.Module):
    """normalized_shape kept as given; eps=None resolved at each call."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = normalized_shape
        self.eps = eps
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(shape))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        n = 1 if isinstance(self.normalized_shape, int) else len(self.normalized_shape)
        dims = tuple(range(-n, 0))
        compute = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        eps = self.eps if self.eps is not None else torch.finfo(compute.dtype).eps
        y = compute / torch.sqrt(compute.pow(2).mean(dim=dims, keepdim=True) + eps)
        if self.weight is not None:
            y = y * self.weight
        return y.to(x.dtype)
'''

RMS_NORM_HF_NAMES = '''
class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm names: eps kept as variance_epsilon."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.variance_epsilon = eps
        self.n_dims = len(normalized_shape)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(normalized_shape))
        else:
            self.register_parameter("weight", None)

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        if input_dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(torch.float32)
        eps = self.variance_epsilon
        if eps is None:
            eps = torch.finfo(hidden_states.dtype).eps
        dims = tuple(range(-self.n_dims, 0))
        variance = hidden_states.pow(2).mean(dims, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + eps)
        if self.weight is not None:
            hidden_states = hidden_states * self.weight
        return hidden_states.to(input_dtype)
'''

RMS_NORM_NO_ATTRIBUTES = '''
class RMSNorm(nn.Module):
    """Nothing kept but the weight and one private tuple."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        shape = torch.Size(normalized_shape)
        self._how = (len(shape), eps)
        self.weight = nn.Parameter(torch.ones(shape)) if elementwise_affine else None

    def forward(self, x):
        n, eps = self._how
        half = x.dtype in (torch.float16, torch.bfloat16)
        xc = x.to(torch.float32) if half else x
        if eps is None:
            eps = torch.finfo(xc.dtype).eps
        flat = xc.reshape(*x.shape[: x.dim() - n], -1)
        y = (flat * (flat.square().mean(-1, keepdim=True) + eps).rsqrt()).reshape(x.shape)
        if self.weight is not None:
            y = y * self.weight
        return y.to(x.dtype)
'''

BATCH_NORM_NO_ATTRIBUTES = '''
class BatchNorm1d(nn.Module):
    """Nothing kept but the parameters, the buffers and one private tuple; options are read
    from whether weight and running_mean exist."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__()
        self._how = (eps, momentum)
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.weight = self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x):
        eps, momentum = self._how
        dtype = x.dtype
        x = x.float() if dtype in (torch.float16, torch.bfloat16) else x
        dims = [0] + list(range(2, x.dim()))
        view = [1, x.shape[1]] + [1] * (x.dim() - 2)
        tracking = self.running_mean is not None
        if self.training or not tracking:
            mean = x.mean(dims)
            var = ((x - mean.view(view)) ** 2).mean(dims)
            if self.training and tracking:
                with torch.no_grad():
                    self.num_batches_tracked += 1
                    m = momentum if momentum is not None else 1 / self.num_batches_tracked.item()
                    n = x.numel() / x.shape[1]
                    self.running_mean.copy_((1 - m) * self.running_mean + m * mean)
                    self.running_var.copy_((1 - m) * self.running_var + m * var * n / (n - 1))
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean.view(view)) / torch.sqrt(var.view(view) + eps)
        if self.weight is not None:
            y = y * self.weight.view(view) + self.bias.view(view)
        return y.to(dtype)
'''

BATCH_NORM_OTHER_NAMES = '''
class BatchNorm1d(nn.Module):
    """Its own names for the options (channels, epsilon, decay, learn, track)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__()
        self.channels, self.epsilon, self.decay = num_features, eps, momentum
        self.learn, self.track = affine, track_running_stats
        ones, zeros = torch.ones(num_features), torch.zeros(num_features)
        self.register_parameter("weight", nn.Parameter(ones) if affine else None)
        self.register_parameter("bias", nn.Parameter(zeros) if affine else None)
        self.register_buffer("running_mean", torch.zeros(num_features) if self.track else None)
        self.register_buffer("running_var", torch.ones(num_features) if self.track else None)
        self.register_buffer(
            "num_batches_tracked", torch.tensor(0, dtype=torch.long) if self.track else None
        )

    def forward(self, x):
        half = x.dtype in (torch.float16, torch.bfloat16)
        xc = x.to(torch.float32) if half else x
        dims = (0, 2) if xc.dim() == 3 else (0,)
        shape = (1, -1, 1) if x.dim() == 3 else (1, -1)
        if self.training or not self.track:
            mean = xc.mean(dim=dims)
            var = xc.var(dim=dims, correction=0)
        else:
            mean, var = self.running_mean, self.running_var
        if self.training and self.track:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = self.decay
                if factor is None:
                    factor = 1.0 / int(self.num_batches_tracked)
                unbiased = xc.var(dim=dims, correction=1)
                self.running_mean.lerp_(mean, factor)
                self.running_var.lerp_(unbiased, factor)
        y = (xc - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + self.epsilon)
        if self.learn:
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y.to(x.dtype)
'''

TASK_TEXT_MODULES = [
    TaskTextModule(
        "LayerNorm keeps an int normalized_shape",
        "layernorm",
        "layer_norm_module",
        LAYER_NORM_INT_SHAPE,
    ),
    TaskTextModule(
        "LayerNorm with Hugging Face's names", "layernorm", "layer_norm_module", LAYER_NORM_HF_NAMES
    ),
    TaskTextModule(
        "LayerNorm without extra attributes",
        "layernorm",
        "layer_norm_module",
        LAYER_NORM_NO_ATTRIBUTES,
    ),
    TaskTextModule(
        "RMSNorm keeps an int normalized_shape", "rmsnorm", "rms_norm_module", RMS_NORM_INT_SHAPE
    ),
    TaskTextModule(
        "RMSNorm with Hugging Face's names", "rmsnorm", "rms_norm_module", RMS_NORM_HF_NAMES
    ),
    TaskTextModule(
        "RMSNorm without extra attributes", "rmsnorm", "rms_norm_module", RMS_NORM_NO_ATTRIBUTES
    ),
    TaskTextModule(
        "BatchNorm1d without extra attributes",
        "batchnorm",
        "batch_norm_module",
        BATCH_NORM_NO_ATTRIBUTES,
    ),
    TaskTextModule(
        "BatchNorm1d with its own names", "batchnorm", "batch_norm_module", BATCH_NORM_OTHER_NAMES
    ),
]
