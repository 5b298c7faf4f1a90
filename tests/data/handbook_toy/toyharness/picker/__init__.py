from .pick import Picker, build_picker

__all__ = ["Picker", "build_picker"]
