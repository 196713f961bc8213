/**
 * A tiny modem that carries bytes inside audio, so mock transcription can read back exactly
 * what mock speech said from the signal itself rather than from metadata a re-encoder would drop.
 *
 * Each byte is one symbol of 10 ms holding two simultaneous tones: one of 16 for the high
 * nibble, one of 16 for the low nibble. Every tone sits on an exact DFT bin of the symbol
 * window (a whole number of cycles), which makes the tones orthogonal, so a Goertzel filter per
 * bin separates them without error, and each symbol starts at phase zero and completes whole
 * cycles, so consecutive symbols join without a jump (no clicks).
 * With 24 kHz audio the bins are 100 Hz apart: nibble tones span 500-2000 Hz and 2200-3700 Hz,
 * the band telephones keep, under a 100 Hz "voice" with harmonics on bins 1-4 for timbre.
 */
const SYMBOL_SECONDS = 0.01;
const HIGH_NIBBLE_FIRST_BIN = 5;
const LOW_NIBBLE_FIRST_BIN = 22;
const NIBBLE_VALUES = 16;
const HIGHEST_BIN = LOW_NIBBLE_FIRST_BIN + NIBBLE_VALUES - 1;
const TONE_AMPLITUDE = 0.3 * 32767;
const VOICE_HARMONICS: readonly (readonly [bin: number, amplitude: number])[] = [
  [1, 0.12 * 32767],
  [2, 0.08 * 32767],
  [3, 0.05 * 32767],
  [4, 0.03 * 32767],
];
/** Below this a window counts as a pause between words. */
const SILENCE_LEVEL = 32;
/** The winning tone must dominate its rivals this much, or the audio is not ours. */
const MIN_DOMINANCE = 16;

export const MIN_MODEM_SAMPLE_RATE = 8000;
export const MAX_MODEM_SAMPLE_RATE = 192_000;
export const SYMBOLS_PER_SECOND = 1 / SYMBOL_SECONDS;

/** Samples per symbol. The highest tone must stay below Nyquist, hence a minimum sample rate. */
export function symbolLength(sampleRate: number): number {
  return Math.round(sampleRate * SYMBOL_SECONDS);
}

export function isModemSampleRate(sampleRate: number): boolean {
  return (
    Number.isInteger(sampleRate) &&
    sampleRate >= MIN_MODEM_SAMPLE_RATE &&
    sampleRate <= MAX_MODEM_SAMPLE_RATE &&
    HIGHEST_BIN < symbolLength(sampleRate) / 2
  );
}

const sineTables = new Map<number, Float64Array>();

/** sin(2*pi*k*i/n) == table[(k*i) % n]: exact phases, and no Math.sin in the hot loop. */
function sineTable(length: number): Float64Array {
  let table = sineTables.get(length);
  if (!table) {
    table = new Float64Array(length);
    for (let i = 0; i < length; i++) table[i] = Math.sin((2 * Math.PI * i) / length);
    sineTables.set(length, table);
  }
  return table;
}

/** Writes one byte's symbol into `out[offset, offset + length)`. */
export function writeByteSymbol(
  out: Int16Array,
  offset: number,
  length: number,
  byte: number,
): void {
  const table = sineTable(length);
  const highBin = HIGH_NIBBLE_FIRST_BIN + (byte >> 4);
  const lowBin = LOW_NIBBLE_FIRST_BIN + (byte & 0x0f);
  for (let i = 0; i < length; i++) {
    let value = TONE_AMPLITUDE * (table[(highBin * i) % length] + table[(lowBin * i) % length]);
    for (const [bin, amplitude] of VOICE_HARMONICS) value += amplitude * table[(bin * i) % length];
    out[offset + i] = Math.round(value);
  }
}

export function isSilentWindow(samples: Int16Array, offset: number, length: number): boolean {
  for (let i = offset; i < offset + length; i++) {
    if (samples[i] > SILENCE_LEVEL || samples[i] < -SILENCE_LEVEL) return false;
  }
  return true;
}

/** The byte a symbol window carries, or null when its tones are not clean modem tones. */
export function readByteSymbol(samples: Int16Array, offset: number, length: number): number | null {
  const high = strongestNibble(samples, offset, length, HIGH_NIBBLE_FIRST_BIN);
  if (high === null) return null;
  const low = strongestNibble(samples, offset, length, LOW_NIBBLE_FIRST_BIN);
  if (low === null) return null;
  return (high << 4) | low;
}

function strongestNibble(
  samples: Int16Array,
  offset: number,
  length: number,
  firstBin: number,
): number | null {
  let best = -1;
  let bestPower = 0;
  let runnerUpPower = 0;
  for (let nibble = 0; nibble < NIBBLE_VALUES; nibble++) {
    const power = goertzelPower(samples, offset, length, firstBin + nibble);
    if (power > bestPower) {
      runnerUpPower = bestPower;
      bestPower = power;
      best = nibble;
    } else if (power > runnerUpPower) {
      runnerUpPower = power;
    }
  }
  if (best < 0 || bestPower < MIN_DOMINANCE * runnerUpPower) return null;
  return best;
}

/** Power of DFT bin `bin` over the window, at one multiply per sample. */
function goertzelPower(samples: Int16Array, offset: number, length: number, bin: number): number {
  const coefficient = 2 * Math.cos((2 * Math.PI * bin) / length);
  let previous = 0;
  let beforePrevious = 0;
  for (let i = offset; i < offset + length; i++) {
    const current = samples[i] + coefficient * previous - beforePrevious;
    beforePrevious = previous;
    previous = current;
  }
  return (
    previous * previous + beforePrevious * beforePrevious - coefficient * previous * beforePrevious
  );
}
