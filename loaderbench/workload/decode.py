"""The decoders of the synthetic dataset's JPEGs (the `decoder` grid axis, `--decoder`).

- `pil`: PIL decodes in the worker, then torchvision's `RandomResizedCrop(224)`,
  `RandomHorizontalFlip()` and `PILToTensor()` on the PIL image (`imagenet_train_transform` in
  datasets.py).
- `torchvision`: `torchvision.io.decode_jpeg` decodes in the worker (libjpeg-turbo on the CPU,
  into a uint8 tensor), then `transforms.v2.RandomResizedCrop(224)` and `RandomHorizontalFlip()`
  on that tensor (`tensor_train_transform`).
- `nvjpeg`: the worker sends the encoded bytes; each batch is decoded and cropped on the GPU
  (`GPUDecode`, `BatchRandomResizedCrop`; NOTE [decoding on the GPU]).

All three give a `torch.uint8` tensor of shape (3, 224, 224) per sample (CHW), (B, 3, 224, 224)
per batch. torchvision is imported only by the functions that use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "BatchRandomResizedCrop",
    "EncodedCollate",
    "EncodedJPEGs",
    "GPUDecode",
    "decode_jpeg_cpu",
    "encoded_bytes",
    "tensor_train_transform",
]

IMAGE_SIZE = 224


def tensor_train_transform() -> Callable[[torch.Tensor], torch.Tensor]:
    """The ImageNet training augmentation on uint8 image tensors: `transforms.v2`
    `RandomResizedCrop(224)` (bilinear, antialiased, as the PIL path) and
    `RandomHorizontalFlip()`. Takes a (3, H, W) uint8 tensor on any device and returns a
    (3, 224, 224) uint8 tensor on the same device."""
    from torchvision.transforms import v2

    transform: Callable[[torch.Tensor], torch.Tensor] = v2.Compose(
        [v2.RandomResizedCrop(IMAGE_SIZE, antialias=True), v2.RandomHorizontalFlip()]
    )
    return transform


def encoded_bytes(jpeg: bytes) -> torch.Tensor:
    """A JPEG's bytes as the 1-D uint8 tensor torchvision's decoders take (a copy: the tensor
    owns writable memory, so it can be shared with the main process and pinned)."""
    return torch.frombuffer(bytearray(jpeg), dtype=torch.uint8)


def decode_jpeg_cpu(data: torch.Tensor) -> torch.Tensor:
    """`torchvision.io.decode_jpeg` on the CPU: a 1-D uint8 tensor of a JPEG's bytes -> its
    (3, H, W) uint8 RGB image. Raises RuntimeError for bytes that are not a JPEG."""
    from torchvision.io import ImageReadMode, decode_jpeg

    image: torch.Tensor = decode_jpeg(data, mode=ImageReadMode.RGB)
    return image


# NOTE [decoding on the GPU]
#     `--decoder nvjpeg` moves the decode and the crop of the synthetic dataset from the workers
#     to the GPU:
#       1. the dataset returns each sample's JPEG as it is stored, a 1-D uint8 tensor of its bytes;
#       2. `EncodedCollate` packs a batch's bytes into one uint8 tensor with their offsets
#          (`EncodedJPEGs`): one tensor per batch crosses from the worker through shared memory,
#          not one per image (with torch's `file_descriptor` sharing strategy each tensor in
#          flight holds a descriptor: 256 per batch, times the batches in flight of 16 workers,
#          would pass a common open-file limit of 1,024); pin_memory pins it like any batch;
#       3. the host-to-device copy leaves it where it is (`EncodedJPEGs.to` returns it): nvJPEG
#          reads the bitstreams from host memory and copies them itself, inside the decode;
#       4. `GPUDecode` decodes the batch with `torchvision.io.decode_jpeg(list, device=...)`
#          (nvJPEG's batched decode), then crops, resizes and flips the whole batch at once on
#          the GPU (`BatchRandomResizedCrop`): (B, 3, 224, 224) uint8, as the CPU decoders give.
#     Why the crop is batched: a v2 RandomResizedCrop and flip per image is some 15 small
#     kernels and their Python around them, 0.16-0.3 ms of the calling thread's time per image
#     on the H200 host (40-75 ms for a batch of 256, against nvJPEG's 10-14 ms for its decode),
#     and that host time swung by 1.6x between stretches of seconds of the same run. The GPU
#     then waited for the launches, and the decode path's cost was mostly the host's
#     (docs/benchmarks.md, "Where a GPU decode's time goes"). The batched crop draws each
#     image's window with torchvision's own `RandomResizedCrop.get_params` and resamples every
#     window in one `torchvision.ops.roi_align` per image size (each output pixel the mean of
#     bilinear samples spaced at most one input pixel apart: a box-filtered downscale, where v2
#     uses an antialiased bilinear filter; the batch's shape, dtype and cost per pixel are what
#     a training step sees).
#     Where it runs: with the CUDA prefetcher (`--prefetch on`) as the prefetcher's transform, on
#     its side stream, while the step before runs (overlapped); without it, before the step, on
#     the step's stream (serialised). The prefetch axis measures both. Either way the batch is
#     usable only once it is decoded and cropped: the ready instant (t1 in NOTE [timing model],
#     measure/timing.py) is marked on the step's stream after the crops were queued there (or
#     after that stream was made to wait for the side stream), so the decode's time that the
#     step does not hide is data-wait.
#     What torchvision does underneath: the decode runs on a CUDA stream of its own, and the call
#     returns only when that stream is done (it synchronises it), having made the current
#     stream wait for it; the crops are queued on the current stream. So the thread that
#     decodes (the main process's) is busy for the whole decode. Without the prefetcher the
#     decode can still run beside kernels of the step before that are queued and not finished
#     (they are on another stream); the crops, on the step's stream, cannot.


class EncodedJPEGs:
    """A batch's JPEGs, still encoded (NOTE [decoding on the GPU]): `data`, every image's bytes
    in one 1-D uint8 CPU tensor, and `offsets`, where each image starts (B + 1 entries, the last
    the total length).

    `to(device)` returns it unchanged (the decoder copies the bytes to the GPU itself);
    `pin_memory()` pins `data`, as the DataLoader's pin_memory does for any batch."""

    def __init__(self, data: torch.Tensor, offsets: Sequence[int]) -> None:
        self.data = data
        self.offsets = list(offsets)

    @classmethod
    def pack(cls, images: Sequence[torch.Tensor]) -> EncodedJPEGs:
        """One buffer holding `images` (1-D uint8 tensors) back to back."""
        offsets = [0]
        for t in images:
            offsets.append(offsets[-1] + int(t.numel()))
        data = torch.cat(list(images)) if images else torch.empty(0, dtype=torch.uint8)
        return cls(data, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded images."""
        return int(self.data.numel())

    def images(self) -> list[torch.Tensor]:
        """Each image's bytes: 1-D uint8 views of `data` (no copy)."""
        return [self.data[a:b] for a, b in zip(self.offsets, self.offsets[1:])]

    def pin_memory(self) -> EncodedJPEGs:
        return EncodedJPEGs(self.data.pin_memory(), self.offsets)

    def to(self, device: Any, non_blocking: bool = False) -> EncodedJPEGs:
        return self

    def __repr__(self) -> str:
        return f"EncodedJPEGs({len(self)} images, {self.nbytes:,} bytes)"


class EncodedCollate:
    """The collate function of `--decoder nvjpeg`: items `(jpeg bytes tensor, label, ...)` ->
    `(EncodedJPEGs, collate(the rest))`; with one thing besides the image (the label), the rest
    is `collate(labels)` (a (B,) int64 tensor with torch's default collate). Picklable, so it
    runs in spawned workers too."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> tuple[Any, ...]:
        encoded = EncodedJPEGs.pack([item[0] for item in items])
        rest = [item[1] if len(item) == 2 else tuple(item[1:]) for item in items]
        return encoded, self.collate(rest)


class BatchRandomResizedCrop:
    """ImageNet's training crop for a whole batch at once, on the images' device (NOTE
    [decoding on the GPU]): for each image a window drawn as torchvision's
    `RandomResizedCrop.get_params` draws it (area `scale` of the image, aspect ratio in `ratio`,
    log-uniform), resampled to `size` x `size` by `torchvision.ops.roi_align` (the mean of
    bilinear samples per output pixel, `sampling_ratio` adaptive), then flipped left-right with
    probability `flip_p`.

    `crop(images)`: `images`, a list of (3, H_i, W_i) uint8 tensors on one device (sizes may
    differ: one roi_align per size) -> a (B, 3, size, size) uint8 tensor in the same order.
    Raises ValueError for an empty list or an image that is not 3-D."""

    def __init__(self, size: int = IMAGE_SIZE, scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), flip_p: float = 0.5) -> None:
        self.size = int(size)
        self.scale = [float(scale[0]), float(scale[1])]
        self.ratio = [float(ratio[0]), float(ratio[1])]
        self.flip_p = float(flip_p)

    def windows(self, images: Sequence[torch.Tensor]) -> list[tuple[int, int, int, int]]:
        """Each image's window (top, left, height, width) in pixels, drawn from torch's RNG."""
        from torchvision.transforms import RandomResizedCrop

        return [RandomResizedCrop.get_params(image, self.scale, self.ratio) for image in images]

    def __call__(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        from torchvision.ops import roi_align

        if not images:
            raise ValueError("BatchRandomResizedCrop needs at least one image")
        if any(image.dim() != 3 for image in images):
            raise ValueError("BatchRandomResizedCrop takes (C, H, W) images")
        windows = self.windows(images)
        flips = torch.rand(len(images)) < self.flip_p
        device = images[0].device
        out = torch.empty((len(images), images[0].shape[0], self.size, self.size), dtype=torch.uint8, device=device)
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for k, image in enumerate(images):
            by_shape.setdefault(tuple(image.shape), []).append(k)
        for ks in by_shape.values():
            stacked = torch.stack([images[k] for k in ks]).to(torch.float32)
            boxes = torch.tensor([[n, j, i, j + w, i + h] for n, (i, j, h, w) in enumerate(windows[k] for k in ks)],
                                 dtype=torch.float32).to(device, non_blocking=True)
            resized = roi_align(stacked, boxes, output_size=self.size, spatial_scale=1.0, sampling_ratio=-1,
                                aligned=True)
            flip = flips[ks].to(device, non_blocking=True).view(-1, 1, 1, 1)
            resized = torch.where(flip, resized.flip(-1), resized)
            out[torch.tensor(ks, device=device)] = resized.round_().clamp_(0, 255).to(torch.uint8)
        return out


class GPUDecode:
    """Decode a batch of `EncodedJPEGs` on `device` and crop it there (NOTE [decoding on the
    GPU]): `decoder(batch)` returns the batch (a tuple or list) with every `EncodedJPEGs` item
    replaced by a (B, 3, 224, 224) uint8 tensor on `device`; other items are kept as they are.
    `transform`: None (default) crops and flips the batch at once (`BatchRandomResizedCrop`);
    otherwise a callable applied to each decoded (3, H, W) image, whose outputs are stacked.

    Raises RuntimeError (torchvision's) when torchvision was built without nvJPEG or the bytes
    are not JPEGs."""

    def __init__(self, device: torch.device | str, transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        self.device = torch.device(device)
        self.transform = transform
        self.batch_crop = BatchRandomResizedCrop()

    def decode(self, encoded: EncodedJPEGs) -> torch.Tensor:
        """The images of `encoded`, decoded, cropped and stacked on the device."""
        from torchvision.io import ImageReadMode, decode_jpeg

        decoded = decode_jpeg(encoded.images(), mode=ImageReadMode.RGB, device=self.device)
        if self.transform is None:
            return self.batch_crop(decoded)
        return torch.stack([self.transform(image) for image in decoded])

    def __call__(self, batch: Any) -> Any:
        if isinstance(batch, EncodedJPEGs):
            return self.decode(batch)
        if isinstance(batch, (tuple, list)):
            items = [self.decode(x) if isinstance(x, EncodedJPEGs) else x for x in batch]
            return type(batch)(items) if not hasattr(batch, "_fields") else type(batch)(*items)
        return batch
