"""Views over one Trace: summary, params, flops (the core of `inspect summary/params/flops`)."""

from torchinspect.analysis.flops import FlopsResult, count_flops
from torchinspect.analysis.params import ParamsResult, count_params
from torchinspect.analysis.prepare import LoadOptions
from torchinspect.analysis.summary import Column, Summary, summarize

__all__ = ["Column", "FlopsResult", "LoadOptions", "ParamsResult", "Summary", "count_flops",
           "count_params", "summarize"]
