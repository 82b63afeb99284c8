"""Environment variables read by the library in a notebook's kernel and set by the build
(:mod:`attnsvm_book`), kept here so that the build reads them without importing torch."""

#: a file to which every :func:`attnsvm.train.fit` appends one line ``<device> <engine path>``;
#: the build sets it per notebook, so its execution report says which engine path ran
ENGINE_LOG_ENV = "ATTNSVM_ENGINE_LOG"
