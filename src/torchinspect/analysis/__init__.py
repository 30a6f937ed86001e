"""Views over one Trace: summary, params, flops (the core of `inspect summary/params/flops`)."""

from torchinspect.analysis.flops import FlopsResult, count_flops
from torchinspect.analysis.params import ParamsResult, count_params
from torchinspect.analysis.summary import Column, Summary, summarize
from torchinspect.sources.case import ModelOptions

__all__ = ["Column", "FlopsResult", "ModelOptions", "ParamsResult", "Summary", "count_flops",
           "count_params", "summarize"]
