"""Errors a user can act on: each names the file, config key or rule at fault."""


class QuantladderError(Exception):
    """Base class: the message is meant for the person running the workflow."""


class ConfigError(QuantladderError):
    pass


class ModelFileError(QuantladderError):
    pass


class DataError(QuantladderError):
    pass


class CardMismatchError(QuantladderError):
    pass
