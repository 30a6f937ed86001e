import torch.nn.functional as F


def residual(x, fn, p=0.1):
    return x + F.dropout(fn(x), p)  # expect: TI004


def residual_mode_aware(x, fn, training, p=0.1):
    return x + F.dropout(fn(x), p, training=training)
