"""Lightning `Trainer` with `TraceMLLightningCallback`: a small MLP, 12 training batches."""

import _common
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from traceml.integrations import TraceMLLightningCallback


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _common.mlp()
        self.last_loss = torch.zeros(())

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _i: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    _common.seed()
    module = Regressor()
    loader = DataLoader(TensorDataset(torch.randn(12 * 16, 64), torch.randn(12 * 16, 1)), 16)
    trainer = L.Trainer(
        max_steps=12,
        callbacks=[TraceMLLightningCallback()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        deterministic=True,
    )
    trainer.fit(module, loader)
    _common.report(module.last_loss, module)
