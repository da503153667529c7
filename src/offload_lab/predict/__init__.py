"""A pod predicted from hardware figures: the catalog (:mod:`.catalog`), the model's sizes from its config
(:mod:`.shape`), the physics of a decode step and a prefill (:mod:`.physics`), the calibration against the study's
published figures (:mod:`.study`) and the pod model file the emulated pod reads (:mod:`.podfile`)."""
