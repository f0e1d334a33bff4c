"""Search spaces: the file schema (``schema``), what the knobs mean (``knobs``) and sampling (``sampling``)."""
from .knobs import KNOBS, Settings, params_to_sketch, settings, sketch_to_params
from .sampling import distribution, enumerate_space, sample
from .schema import Parameter, SearchSpace, load_space, parameter_to_dict, shipped_spaces, space_from_dict, space_to_dict

__all__ = ["KNOBS", "Parameter", "SearchSpace", "Settings", "distribution", "enumerate_space", "load_space",
           "parameter_to_dict", "params_to_sketch", "sample", "settings", "shipped_spaces", "sketch_to_params",
           "space_from_dict", "space_to_dict"]
