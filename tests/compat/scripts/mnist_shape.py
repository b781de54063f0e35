"""The loop shape of pytorch/examples `mnist/main.py` (written here, not copied): a two-conv Net
with dropout and log_softmax, `train()` and `test()` per epoch, Adadelta with StepLR, progress
printed every `log_interval` batches. Synthetic 1x28x28 images instead of the MNIST download."""

import argparse

import _common
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

import traceml


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def train(
    args: argparse.Namespace, model: Net, loader: DataLoader, opt: torch.optim.Optimizer, epoch: int
) -> float:
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        with traceml.trace_step(model):
            opt.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            opt.step()
        if batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)}]"
                f"\tLoss: {loss.item():.6f}"
            )
    return loss.item()


def test(model: Net, loader: DataLoader) -> None:
    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            total += F.nll_loss(output, target, reduction="sum").item()
            correct += int(output.argmax(dim=1).eq(target).sum().item())
    n = len(loader.dataset)
    print(f"Test set: Average loss: {total / n:.4f}, Accuracy: {correct}/{n}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--log-interval", type=int, default=5)
    args = parser.parse_args()
    _common.seed(1)
    train_set = TensorDataset(
        torch.randn(10 * args.batch_size, 1, 28, 28), torch.randint(0, 10, (10 * args.batch_size,))
    )
    test_set = TensorDataset(torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,)))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=1000)
    model = Net()
    opt = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(opt, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        loss = train(args, model, train_loader, opt, epoch)
        test(model, test_loader)
        scheduler.step()
    _common.report(loss, model, opt)


if __name__ == "__main__":
    main()
