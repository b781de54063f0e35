"""The loop shape of pytorch/examples `word_language_model/main.py` (written here, not copied):
an Embedding-LSTM-Linear model, `batchify` and `get_batch` slicing a token stream with bptt (no
DataLoader), `repackage_hidden` between batches, gradient clipping and a hand-written SGD update
(no optimizer object), evaluation and LR annealing per epoch. A random token stream stands in
for Wikitext-2."""

import _common
import torch
from torch import nn

import traceml

NTOKENS, BPTT, CLIP = 200, 16, 0.25


class RNNModel(nn.Module):
    def __init__(self, ninp: int = 32, nhid: int = 32, nlayers: int = 2) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(NTOKENS, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.2)
        self.decoder = nn.Linear(nhid, NTOKENS)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(
        self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, NTOKENS)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(self.nlayers, bsz, self.nhid)
        return zeros, zeros.clone()


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(v.detach() for v in h)


def evaluate(model: RNNModel, source: torch.Tensor, criterion: nn.Module) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(source.size(1))
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, BPTT):
            data, targets = get_batch(source, i)
            output, hidden = model(data, hidden)
            total += len(data) * criterion(output, targets).item()
    return total / (len(source) - 1)


def main() -> None:
    _common.seed(1111)
    train_data = batchify(torch.randint(0, NTOKENS, (20 * 16 * BPTT + 1,)), 20)
    val_data = batchify(torch.randint(0, NTOKENS, (10 * 2 * BPTT + 1,)), 10)
    model, criterion, lr = RNNModel(), nn.NLLLoss(), 20.0
    best = None
    for epoch in range(1, 3):
        model.train()
        hidden = model.init_hidden(20)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, BPTT)):
            data, targets = get_batch(train_data, i)
            with traceml.trace_step(model):
                model.zero_grad()
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
                loss = criterion(output, targets)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
            if batch % 5 == 0:
                print(f"| epoch {epoch} | batch {batch} | lr {lr:.2f} | loss {loss.item():.4f}")
        val_loss = evaluate(model, val_data, criterion)
        print(f"| end of epoch {epoch} | valid loss {val_loss:.4f}")
        if best is None or val_loss < best:
            best = val_loss
        else:
            lr /= 4.0
    _common.report(loss, model)


if __name__ == "__main__":
    main()
