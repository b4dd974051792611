"""`loaderbench make-data`: write a real JPEG ImageFolder to test storage with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from loaderbench.cli import common
from loaderbench.errors import UsageError


def make_data_command(
    path: Annotated[Path, typer.Argument(help="Folder to write the ImageFolder into.")],
    images: Annotated[str, typer.Option(help="Number of JPEG images.")] = "1000",
    size: Annotated[str, typer.Option(help="Image size WxH.")] = "500x375",
    classes: Annotated[str, typer.Option(help="Number of class folders.")] = "10",
    quality: Annotated[str, typer.Option(help="JPEG quality 1-100.")] = "90",
    seed: Annotated[str, typer.Option(help="Random seed.")] = "0",
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty folder.")] = False,
) -> None:
    """Write a real JPEG ImageFolder (PATH/class_XXX/img_XXXXX.jpg) to test storage with."""
    from loaderbench import parsers
    from loaderbench.workload.datasets import make_image_folder

    def body() -> None:
        def num(v: str, flag: str, lo: int, hi: int) -> int:
            try:
                return parsers.int_in(lo, hi)(v)
            except ValueError as exc:
                raise UsageError(f"{flag}: {exc}") from None

        try:
            wh = parsers.size(size)
        except ValueError as exc:
            raise UsageError(f"--size: {exc}") from None
        info = make_image_folder(
            path,
            images=num(images, "--images", 1, 10_000_000),
            size=wh,
            classes=num(classes, "--classes", 1, 100_000),
            quality=num(quality, "--quality", 1, 100),
            seed=num(seed, "--seed", 0, 2**31 - 1),
            force=force,
        )
        common.stderr().print(
            f"wrote {info['images']} JPEGs in {info['classes']} classes "
            f"({info['bytes'] / 2**20:.1f} MiB) to {path}",
            highlight=False, markup=False,
        )

    common.guard(body)


