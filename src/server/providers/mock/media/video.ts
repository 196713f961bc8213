import { type DibVideo, dibFrameBytes, dibStride, encodeAvi, readAvi } from "../../../media/avi.js";
import { hslToRgb, type Rgb } from "./color.js";
import { SeededRandom } from "./seed.js";

/**
 * Mock video: an uncompressed AVI of a small animated scene drawn from the prompt (drifting
 * gradient, scrolling stripes, a bouncing ball). Tiny by default, since uncompressed frames
 * grow fast: 64x36 at 6 fps is about 41 KB per second.
 */
export interface MockVideoOptions {
  seconds: number;
  width?: number;
  height?: number;
  fps?: number;
}

export const MOCK_VIDEO_DEFAULTS = { width: 64, height: 36, fps: 6 } as const;
export const MAX_VIDEO_SIDE = 1920;
export const MAX_VIDEO_FPS = 60;
/** Uncompressed frames add up quickly; AVI 1.0 readers also dislike RIFFs near 1 GB. */
export const MAX_VIDEO_BYTES = 256 * 1024 * 1024;
/** New frames fade in from the last original frame over this long, so the seam is soft. */
const CROSSFADE_SECONDS = 0.5;

/**
 * The frames the mock draws for a video asked at `asked` (`WIDTHxHEIGHT`): that size where it is
 * no larger than the default's long side, else scaled down to it with its aspect ratio kept
 * (1280x720 is 64x36, 720x1280 is 36x64). Nothing asked is the default.
 */
export function mockVideoSize(asked: string | undefined): { width: number; height: number } {
  const sides = asked?.match(/^(\d+)x(\d+)$/);
  const { width, height } = MOCK_VIDEO_DEFAULTS;
  if (!sides) return { width, height };
  const [askedWidth, askedHeight] = [Number(sides[1]), Number(sides[2])];
  const longest = Math.max(width, height);
  const scale = Math.min(1, longest / Math.max(askedWidth, askedHeight));
  return {
    width: Math.max(1, Math.round(askedWidth * scale)),
    height: Math.max(1, Math.round(askedHeight * scale)),
  };
}

export function mockVideo(prompt: string, opts: MockVideoOptions): Buffer {
  const width = opts.width ?? MOCK_VIDEO_DEFAULTS.width;
  const height = opts.height ?? MOCK_VIDEO_DEFAULTS.height;
  const fps = opts.fps ?? MOCK_VIDEO_DEFAULTS.fps;
  assertGeometry(width, height, fps);
  const frameCount = framesFor(opts.seconds, fps);
  assertBudget(width, height, frameCount);
  const scene = sceneFor(prompt);
  const frames = Array.from({ length: frameCount }, (_, i) =>
    renderFrame(scene, i / fps, width, height),
  );
  return encodeAvi({ width, height, fps, frames });
}

/**
 * The original's frames followed by `extraSeconds` of the scene `prompt` describes, continuing
 * the clock where the original stopped. Accepts any 24-bit uncompressed AVI (what mockVideo
 * writes); throws a RangeError for anything else.
 */
export function extendMockVideo(
  original: Uint8Array,
  prompt: string,
  extraSeconds: number,
): Buffer {
  const parsed = readAvi(original);
  if (!parsed) throw new RangeError("the video to extend is not a valid AVI");
  const { width, height, fps } = parsed.info;
  const frameBytes = dibFrameBytes(width, height);
  const uncompressed =
    parsed.compression === 0 &&
    parsed.bitCount === 24 &&
    parsed.frames.every((frame) => frame.length === frameBytes);
  if (!uncompressed || !Number.isInteger(fps)) {
    throw new RangeError("only uncompressed 24-bit AVIs at whole frame rates can be extended");
  }
  assertGeometry(width, height, fps);
  const extraFrames = framesFor(extraSeconds, fps);
  assertBudget(width, height, parsed.frames.length + extraFrames);

  const scene = sceneFor(prompt);
  const firstNew = parsed.frames.length;
  const lastOriginal = parsed.frames[firstNew - 1];
  const fadeFrames = Math.min(extraFrames, Math.round(CROSSFADE_SECONDS * fps));
  const added = Array.from({ length: extraFrames }, (_, i) => {
    const frame = renderFrame(scene, (firstNew + i) / fps, width, height);
    if (lastOriginal && i < fadeFrames) crossfade(frame, lastOriginal, (i + 1) / (fadeFrames + 1));
    return frame;
  });
  const video: DibVideo = { width, height, fps, frames: [...parsed.frames, ...added] };
  return encodeAvi(video);
}

interface Scene {
  topHue: number;
  bottomHue: number;
  hueDriftPerSecond: number;
  stripePeriod: number;
  stripeSpeed: number;
  ballColor: Rgb;
  ballRadius: number;
  ballStart: readonly [number, number];
  ballVelocity: readonly [number, number];
}

function sceneFor(prompt: string): Scene {
  const random = new SeededRandom("video", prompt);
  const topHue = random.range(0, 360);
  return {
    topHue,
    bottomHue: topHue + random.range(30, 120),
    hueDriftPerSecond: random.range(-30, 30),
    stripePeriod: random.range(0.15, 0.4),
    stripeSpeed: random.range(0.1, 0.5) * (random.next() < 0.5 ? -1 : 1),
    ballColor: hslToRgb(topHue + 180 + random.range(-30, 30), 0.8, 0.6),
    ballRadius: random.range(0.12, 0.22),
    ballStart: [random.next(), random.next()],
    ballVelocity: [random.range(0.2, 0.6), random.range(0.2, 0.6)],
  };
}

/** Coordinates are fractions of the frame so the scene looks alike at any size. */
function renderFrame(scene: Scene, time: number, width: number, height: number): Buffer {
  const frame = Buffer.alloc(dibFrameBytes(width, height));
  const stride = dibStride(width);
  const drift = scene.hueDriftPerSecond * time;
  const top = hslToRgb(scene.topHue + drift, 0.6, 0.35);
  const bottom = hslToRgb(scene.bottomHue + drift, 0.6, 0.6);
  const aspect = width / height;
  const ballX = bounce(scene.ballStart[0] + scene.ballVelocity[0] * time) * aspect;
  const ballY = bounce(scene.ballStart[1] + scene.ballVelocity[1] * time);
  const radius = scene.ballRadius;
  const stripeShift = scene.stripeSpeed * time;

  for (let y = 0; y < height; y++) {
    const v = (y + 0.5) / height;
    // DIB rows run bottom-up.
    const rowStart = (height - 1 - y) * stride;
    for (let x = 0; x < width; x++) {
      const u = (x + 0.5) / height;
      const stripe = ((((u + v) / scene.stripePeriod + stripeShift) % 1) + 1) % 1;
      const light = stripe < 0.5 ? 1 : 0.85;
      const dx = u - ballX;
      const dy = v - ballY;
      const inBall = dx * dx + dy * dy <= radius * radius;
      const p = rowStart + x * 3;
      for (let channel = 0; channel < 3; channel++) {
        const value = inBall
          ? scene.ballColor[channel]
          : (top[channel] + (bottom[channel] - top[channel]) * v) * light;
        // DIB pixels are stored blue, green, red.
        frame[p + 2 - channel] = Math.round(value);
      }
    }
  }
  return frame;
}

/** Maps an ever-growing position onto 0..1 and back, like a ball between two walls. */
function bounce(position: number): number {
  const phase = ((position % 2) + 2) % 2;
  return phase <= 1 ? phase : 2 - phase;
}

function crossfade(frame: Buffer, from: Uint8Array, amount: number): void {
  for (let i = 0; i < frame.length; i++)
    frame[i] = Math.round(from[i] + (frame[i] - from[i]) * amount);
}

function framesFor(seconds: number, fps: number): number {
  if (!Number.isFinite(seconds) || seconds <= 0) {
    throw new RangeError("video length must be a positive number of seconds");
  }
  return Math.max(1, Math.round(seconds * fps));
}

function assertGeometry(width: number, height: number, fps: number): void {
  const side = (value: number): boolean =>
    Number.isInteger(value) && value >= 1 && value <= MAX_VIDEO_SIDE;
  if (!side(width) || !side(height)) {
    throw new RangeError(`video width and height must be integers in 1..${MAX_VIDEO_SIDE}`);
  }
  if (!Number.isInteger(fps) || fps < 1 || fps > MAX_VIDEO_FPS) {
    throw new RangeError(`video fps must be an integer in 1..${MAX_VIDEO_FPS}`);
  }
}

function assertBudget(width: number, height: number, frames: number): void {
  if (dibFrameBytes(width, height) * frames > MAX_VIDEO_BYTES) {
    throw new RangeError(`video would exceed ${MAX_VIDEO_BYTES} bytes uncompressed`);
  }
}
