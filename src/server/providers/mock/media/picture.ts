import { createHash } from "node:crypto";
import {
  AUTO_SIZE,
  decodeRgbaPng,
  encodePng,
  type ImageSize,
  parseSize,
  readPngSize,
} from "../../../media/png.js";
import { hslToRgb, mixRgb, type Rgb } from "./color.js";
import { SeededRandom } from "./seed.js";

/**
 * A deterministic picture for the prompt: a two-colour gradient at a hashed angle with a few
 * translucent circles and rectangles in a harmonious palette. Same prompt and size, same bytes.
 */
export function mockImage(prompt: string, size = "1024x1024"): Buffer {
  const dimensions = parseSize(size);
  if (!dimensions) throw new RangeError(`unsupported image size: ${size}`);
  const { width, height } = dimensions;
  const random = new SeededRandom("image", prompt);
  const baseHue = random.range(0, 360);
  const rgba = new Uint8Array(width * height * 4);
  paintGradient(
    rgba,
    dimensions,
    hslToRgb(baseHue, random.range(0.5, 0.8), random.range(0.25, 0.4)),
    hslToRgb(baseHue + random.range(40, 90), random.range(0.5, 0.8), random.range(0.6, 0.75)),
    random.range(0, Math.PI * 2),
  );
  const shapeCount = random.int(3, 6);
  const short = Math.min(width, height);
  for (let i = 0; i < shapeCount; i++) {
    const color = hslToRgb(baseHue + 120 * random.int(1, 2) + random.range(-20, 20), 0.7, 0.55);
    const centerX = random.range(0.15, 0.85) * width;
    const centerY = random.range(0.15, 0.85) * height;
    const opacity = random.range(0.55, 0.9);
    if (random.next() < 0.6) {
      paintCircle(
        rgba,
        dimensions,
        centerX,
        centerY,
        random.range(0.06, 0.22) * short,
        color,
        opacity,
      );
    } else {
      const halfWidth = random.range(0.05, 0.2) * width;
      const halfHeight = random.range(0.05, 0.2) * height;
      paintRect(
        rgba,
        dimensions,
        centerX - halfWidth,
        centerY - halfHeight,
        centerX + halfWidth,
        centerY + halfHeight,
        color,
        opacity,
      );
    }
  }
  return encodePng(width, height, rgba);
}

function paintGradient(rgba: Uint8Array, size: ImageSize, from: Rgb, to: Rgb, angle: number): void {
  const { width, height } = size;
  const dx = Math.cos(angle);
  const dy = Math.sin(angle);
  // Project the corners so the gradient spans exactly the picture whatever the angle.
  const corners = [0, width * dx, height * dy, width * dx + height * dy];
  const min = Math.min(...corners);
  const span = Math.max(...corners) - min || 1;
  // 256 precomputed RGBA words written through a 32-bit view: per-pixel colour maths would
  // dominate the time at 1024x1024. Building the words from bytes keeps this endian-neutral.
  const stepBytes = new Uint8Array(256 * 4);
  for (let i = 0; i < 256; i++) {
    stepBytes.set([...mixRgb(from, to, i / 255), 255], i * 4);
  }
  const steps = new Uint32Array(stepBytes.buffer);
  const pixels = new Uint32Array(rgba.buffer, rgba.byteOffset, width * height);
  const stepPerX = (dx / span) * 255;
  for (let y = 0; y < height; y++) {
    const rowStart = y * width;
    let position = ((y * dy - min) / span) * 255 + 0.5;
    for (let x = 0; x < width; x++) {
      pixels[rowStart + x] = steps[position | 0];
      position += stepPerX;
    }
  }
}

function paintCircle(
  rgba: Uint8Array,
  size: ImageSize,
  centerX: number,
  centerY: number,
  radius: number,
  color: Rgb,
  opacity: number,
): void {
  const top = Math.max(0, Math.floor(centerY - radius));
  const bottom = Math.min(size.height - 1, Math.ceil(centerY + radius));
  for (let y = top; y <= bottom; y++) {
    const dy = y + 0.5 - centerY;
    const reach = radius * radius - dy * dy;
    if (reach < 0) continue;
    const halfSpan = Math.sqrt(reach);
    const left = Math.max(0, Math.ceil(centerX - halfSpan - 0.5));
    const right = Math.min(size.width - 1, Math.floor(centerX + halfSpan - 0.5));
    for (let x = left; x <= right; x++) blend(rgba, (y * size.width + x) * 4, color, opacity);
  }
}

function paintRect(
  rgba: Uint8Array,
  size: ImageSize,
  left: number,
  top: number,
  right: number,
  bottom: number,
  color: Rgb,
  opacity: number,
): void {
  const x0 = Math.max(0, Math.round(left));
  const x1 = Math.min(size.width, Math.round(right));
  const y0 = Math.max(0, Math.round(top));
  const y1 = Math.min(size.height, Math.round(bottom));
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) blend(rgba, (y * size.width + x) * 4, color, opacity);
  }
}

function blend(rgba: Uint8Array, p: number, color: Rgb, opacity: number): void {
  rgba[p] = Math.round(rgba[p] + (color[0] - rgba[p]) * opacity);
  rgba[p + 1] = Math.round(rgba[p + 1] + (color[1] - rgba[p + 1]) * opacity);
  rgba[p + 2] = Math.round(rgba[p + 2] + (color[2] - rgba[p + 2]) * opacity);
}

/**
 * The mock's edit of `image`: a picture painted from the prompt (and the image's bytes, so each
 * image gets its own), laid where the mask is transparent, or blended half over the whole image
 * without a mask. Images `encodePng` did not write are not decoded: the painting stands alone.
 * Same inputs, same bytes.
 */
export function mockImageEdit(
  image: Uint8Array,
  prompt: string,
  size: string | undefined,
  mask?: Uint8Array,
): Buffer {
  const dimensions = (size && size !== "auto" ? parseSize(size) : null) ??
    readPngSize(image) ?? { ...AUTO_SIZE };
  const { width, height } = dimensions;
  const seed = createHash("sha256").update(image).digest("hex");
  const painting = decodeRgbaPng(mockImage(`${prompt}\n${seed}`, `${width}x${height}`));
  if (!painting) throw new Error("the mock painting did not decode");
  const original = decodeRgbaPng(image);
  if (!original) return encodePng(width, height, painting.rgba);
  const base = resample(original, dimensions);
  const decodedMask = mask ? decodeRgbaPng(mask) : null;
  const maskPixels = decodedMask ? resample(decodedMask, dimensions) : null;
  const out = new Uint8Array(width * height * 4);
  for (let i = 0; i < out.length; i += 4) {
    const repaint = maskPixels ? maskPixels[i + 3] === 0 : undefined;
    for (let channel = 0; channel < 4; channel++) {
      const old = base[i + channel];
      const fresh = painting.rgba[i + channel];
      out[i + channel] = repaint === undefined ? (old + fresh + 1) >> 1 : repaint ? fresh : old;
    }
  }
  return encodePng(width, height, out);
}

/** Nearest-neighbour resampling of RGBA pixels to another size. */
function resample(from: ImageSize & { rgba: Uint8Array }, to: ImageSize): Uint8Array {
  if (from.width === to.width && from.height === to.height) return from.rgba;
  const out = new Uint8Array(to.width * to.height * 4);
  for (let y = 0; y < to.height; y++) {
    const sy = Math.floor((y * from.height) / to.height);
    for (let x = 0; x < to.width; x++) {
      const sx = Math.floor((x * from.width) / to.width);
      out.set(
        from.rgba.subarray((sy * from.width + sx) * 4, (sy * from.width + sx) * 4 + 4),
        (y * to.width + x) * 4,
      );
    }
  }
  return out;
}
