"""The loader transformers' server (5.25 on) hands to the model's own process: transformers' `ModelLoader`, then the
method's fields switched on the loaded model and its stop strings read in answers only. The process unpickles it by
its module, which imports depthattn, so the process also knows the model's classes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from transformers.cli.serving.model_manager import ModelLoader

from .transformers_serve import stop_in_answers_only

if TYPE_CHECKING:
    from ..modeling import DepthAttentionPreTrainedModel


class MethodFieldsLoader(ModelLoader):
    def __init__(self, method_fields: Mapping[str, object], **options):
        super().__init__(**options)
        self.method_fields = dict(method_fields)

    def load_model_and_processor(self, model_id: str, on_progress=None):
        import depthattn  # noqa: F401  (registers the model classes in the model's process)

        model, processor = super().load_model_and_processor(model_id, on_progress=on_progress)
        for name, value in self.method_fields.items():
            cast("DepthAttentionPreTrainedModel", model).switch_method_field(name, value)
        stop_in_answers_only(model)
        return model, processor
