"""Search spaces: the file schema (``schema``), what the knobs mean (``knobs``) and sampling (``sampling``)."""
from .knobs import KNOBS, Settings, params_to_sketch, settings, sketch_to_params
from .sampling import enumerate_space, sample
from .schema import Parameter, SearchSpace, load_space, shipped_spaces, space_from_dict, space_to_dict

__all__ = ["KNOBS", "Parameter", "SearchSpace", "Settings", "enumerate_space", "load_space", "params_to_sketch",
           "sample", "settings", "shipped_spaces", "sketch_to_params", "space_from_dict", "space_to_dict"]
