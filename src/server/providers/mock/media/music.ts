import { MAX_MUSIC_SECONDS } from "../../../media/limits.js";
import { encodeWav } from "../../../media/wav.js";
import { SeededRandom } from "./seed.js";

/**
 * A deterministic melody for a prompt: the hash picks key, scale, tempo and a random walk over
 * the scale; each note is a sine with two soft harmonics under an attack/decay/release envelope,
 * over a quiet root-note bass that changes each bar.
 */
export const MOCK_MUSIC_SAMPLE_RATE = 24_000;

const SCALES: readonly (readonly number[])[] = [
  [0, 2, 4, 7, 9], // major pentatonic
  [0, 3, 5, 7, 10], // minor pentatonic
  [0, 2, 4, 5, 7, 9, 11], // major
  [0, 2, 3, 5, 7, 9, 10], // dorian
];
const NOTE_BEATS: readonly number[] = [0.5, 0.5, 1, 1, 1, 2];
const PROGRESSIONS: readonly (readonly number[])[] = [
  [0, 5, 3, 4],
  [0, 3, 4, 0],
  [0, 4, 5, 3],
];
const MELODY_LEVEL = 0.32 * 32767;
const BASS_LEVEL = 0.14 * 32767;
const ATTACK_SECONDS = 0.01;
const DECAY_SECONDS = 0.08;
const RELEASE_SECONDS = 0.06;
const SUSTAIN_LEVEL = 0.6;

export interface MockMusicOptions {
  sampleRate?: number;
}

export function mockMusic(prompt: string, seconds: number, opts: MockMusicOptions = {}): Buffer {
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_MUSIC_SECONDS) {
    throw new RangeError(`music length must be in (0, ${MAX_MUSIC_SECONDS}] seconds`);
  }
  const sampleRate = opts.sampleRate ?? MOCK_MUSIC_SAMPLE_RATE;
  if (!Number.isInteger(sampleRate) || sampleRate < 8000 || sampleRate > 192_000) {
    throw new RangeError("music sample rate must be an integer in 8000..192000");
  }
  const random = new SeededRandom("music", prompt);
  const rootMidi = random.int(55, 66);
  const scale = random.pick(SCALES);
  const beatSeconds = 60 / random.int(84, 140);
  const progression = random.pick(PROGRESSIONS);
  const mix = new Float64Array(Math.max(1, Math.round(seconds * sampleRate)));

  const barSeconds = beatSeconds * 4;
  for (let bar = 0; bar * barSeconds < seconds; bar++) {
    const degree = progression[bar % progression.length] % scale.length;
    const bassMidi = rootMidi - 12 + scale[degree];
    addNote(mix, sampleRate, bar * barSeconds, barSeconds, midiToHz(bassMidi), BASS_LEVEL);
  }

  let step = random.int(0, scale.length - 1);
  for (let start = 0; start < seconds; ) {
    const beats = random.pick(NOTE_BEATS);
    step = Math.max(0, Math.min(scale.length * 2 - 1, step + random.int(-2, 2)));
    const midi = rootMidi + 12 * Math.floor(step / scale.length) + scale[step % scale.length];
    // One note in eight is a rest, so the line breathes.
    if (random.next() >= 0.125) {
      addNote(mix, sampleRate, start, beats * beatSeconds, midiToHz(midi), MELODY_LEVEL);
    }
    start += beats * beatSeconds;
  }

  return encodeWav(toInt16WithFadeOut(mix, sampleRate), sampleRate);
}

function addNote(
  mix: Float64Array,
  sampleRate: number,
  startSeconds: number,
  durationSeconds: number,
  frequency: number,
  level: number,
): void {
  const first = Math.round(startSeconds * sampleRate);
  const count = Math.round(durationSeconds * sampleRate);
  const last = Math.min(mix.length, first + count);
  const attack = ATTACK_SECONDS * sampleRate;
  const decay = DECAY_SECONDS * sampleRate;
  const release = Math.min(RELEASE_SECONDS * sampleRate, count / 2);
  const phaseStep = (2 * Math.PI * frequency) / sampleRate;
  for (let i = first; i < last; i++) {
    const t = i - first;
    let envelope: number;
    if (t < attack) envelope = t / attack;
    else if (t < attack + decay) envelope = 1 - (1 - SUSTAIN_LEVEL) * ((t - attack) / decay);
    else envelope = SUSTAIN_LEVEL;
    const untilEnd = count - t;
    if (untilEnd < release) envelope *= untilEnd / release;
    const phase = t * phaseStep;
    const tone = Math.sin(phase) + 0.3 * Math.sin(2 * phase) + 0.12 * Math.sin(3 * phase);
    mix[i] += level * envelope * tone;
  }
}

/** A short fade, because `seconds` may cut a note mid-cycle and a hard stop clicks. */
function toInt16WithFadeOut(mix: Float64Array, sampleRate: number): Int16Array {
  const fade = Math.min(mix.length, Math.round(0.05 * sampleRate));
  const samples = new Int16Array(mix.length);
  for (let i = 0; i < mix.length; i++) {
    const remaining = mix.length - i;
    const gain = remaining < fade ? remaining / fade : 1;
    samples[i] = Math.max(-32768, Math.min(32767, Math.round(mix[i] * gain)));
  }
  return samples;
}

function midiToHz(midi: number): number {
  return 440 * 2 ** ((midi - 69) / 12);
}
