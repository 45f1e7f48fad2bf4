"""Two steps of a GAN whose generator and discriminator are both `nn.Sequential`, each with
its own `Adam`: memtrack names them by the program's variables (`gen`, `disc`, `opt_g`,
`opt_d`). With `lightning-style`, the models are attributes of an object whose method runs
the step (`self.generator`, `self.discriminator`), as a LightningModule's training_step.
With `anonymous`, two `Sequential`s held only by a list: `Sequential` and `Sequential#2`.

    gan_naming.py [plain|lightning-style|anonymous]
"""

import sys

import torch
from torch import nn

torch.manual_seed(0)


def models():
    gen = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
    disc = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    return gen, disc


def plain():
    gen, disc = models()
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    real = torch.randn(4, 16)
    for _ in range(2):
        z = torch.randn(4, 8)
        fake = gen(z)
        opt_d.zero_grad()
        loss_d = bce(disc(real), torch.ones(4, 1)) + bce(disc(fake.detach()), torch.zeros(4, 1))
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(disc(fake), torch.ones(4, 1))
        loss_g.backward()
        opt_g.step()


class GAN:
    def __init__(self):
        self.generator, self.discriminator = models()
        self.opts = (
            torch.optim.Adam(self.generator.parameters(), lr=1e-3),
            torch.optim.Adam(self.discriminator.parameters(), lr=1e-3),
        )
        self.bce = nn.BCEWithLogitsLoss()

    def training_step(self, real):
        opt_g, opt_d = self.opts
        fake = self.generator(torch.randn(4, 8))
        opt_d.zero_grad()
        self.bce(self.discriminator(fake.detach()), torch.zeros(4, 1)).backward()
        opt_d.step()
        opt_g.zero_grad()
        self.bce(self.discriminator(fake), torch.ones(4, 1)).backward()
        opt_g.step()


def lightning_style():
    gan = GAN()
    real = torch.randn(4, 16)
    for _ in range(2):
        gan.training_step(real)


def anonymous():
    nets = list(models())
    for _ in range(2):
        nets[1](nets[0](torch.randn(4, 8))).sum().backward()


if __name__ == "__main__":
    {"lightning-style": lightning_style, "anonymous": anonymous}.get(sys.argv[-1], plain)()
