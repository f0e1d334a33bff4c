"""Search spaces, in the order their modules import one another: a space as values (``model``), what its knobs
mean (``knobs``), which engines its target can use (``engines``), the file schema (``schema``) and sampling
(``sampling``)."""
from .knobs import KNOBS, Settings, params_to_sketch, settings, sketch_to_params
from .model import Parameter, SearchSpace
from .sampling import distribution, enumerate_space, sample
from .schema import load_space, parameter_to_dict, shipped_spaces, space_from_dict, space_to_dict

__all__ = ["KNOBS", "Parameter", "SearchSpace", "Settings", "distribution", "enumerate_space", "load_space",
           "parameter_to_dict", "params_to_sketch", "sample", "settings", "shipped_spaces", "sketch_to_params",
           "space_from_dict", "space_to_dict"]
