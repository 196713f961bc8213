import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readWavInfo } from "../src/server/media/wav.js";
import { mockMusic, transcribeMockPcm } from "../src/server/providers/mock/media/index.js";
import {
  type FakeOpenAIMedia,
  fakeSpeechBytes,
  fakeTranscriptText,
  startFakeOpenAIMedia,
} from "./support/fake-openai-media.js";
import {
  baseConfigWith,
  KEY,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

const UPSTREAM_KEY = "sk-upstream-audio-key";
/** IDR per character of speech and per second of transcribed audio. */
const SPEECH_PRICE = 2;
const TRANSCRIBE_PRICE = 10;

let gw: TestGateway;
let upstream: FakeOpenAIMedia;
let openai: OpenAI;

beforeAll(async () => {
  upstream = await startFakeOpenAIMedia();
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: [UPSTREAM_KEY] },
        { id: "up-errors", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-errors"] },
      ],
      models: [
        { name: "mock-tts", provider: "mock", modality: "speech", price_per_unit: SPEECH_PRICE },
        {
          name: "mock-stt",
          provider: "mock",
          modality: "transcription",
          price_per_unit: TRANSCRIBE_PRICE,
        },
        {
          name: "down-tts",
          provider: "mock-down",
          modality: "speech",
          price_per_unit: SPEECH_PRICE,
        },
        {
          name: "up-tts",
          provider: "up",
          upstream_model: "gpt-4o-mini-tts",
          modality: "speech",
          price_per_unit: 1,
        },
        {
          name: "up-stt",
          provider: "up",
          upstream_model: "whisper-1",
          modality: "transcription",
          price_per_unit: 1,
        },
        {
          name: "up-stt-errors",
          provider: "up-errors",
          modality: "transcription",
          price_per_unit: 1,
        },
      ],
      routes: [{ name: "tts-route", steps: ["mock-tts", "up-tts"] }],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 20_000 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const balanceMicro = (account = "acct") => gw.services.store.getAccount(account)!.balance_micro;
const text = "Hello from the gateway. This sentence is spoken by the mock provider!";

async function errorOf(res: Response) {
  return ((await res.json()) as { error: { code: string; message: string } }).error;
}

function transcriptionForm(
  fields: Record<string, string>,
  file?: { bytes: Uint8Array; name: string },
): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.set(name, value);
  if (file)
    form.set("file", new Blob([new Uint8Array(file.bytes)], { type: "audio/wav" }), file.name);
  return form;
}

function postForm(form: FormData, key = KEY): Promise<Response> {
  return fetch(`${gw.url}/v1/audio/transcriptions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
}

async function speak(input: string, format: "wav" | "pcm" = "wav"): Promise<Buffer> {
  const res = await openai.audio.speech.create({
    model: "mock-tts",
    input,
    voice: "alloy",
    response_format: format,
  });
  return Buffer.from(await res.arrayBuffer());
}

describe("POST /v1/audio/speech on the mock provider", () => {
  it("returns a WAV that lasts as long as the text takes to say, priced per character", async () => {
    const before = balanceMicro();
    const res = await openai.audio.speech.create({
      model: "mock-tts",
      input: text,
      voice: "alloy",
      response_format: "wav",
    });
    expect(res.headers.get("content-type")).toBe("audio/wav");
    const info = readWavInfo(new Uint8Array(await res.arrayBuffer()));
    expect(info).toMatchObject({ sampleRate: 24_000, channels: 1, bitsPerSample: 16 });
    expect(info!.durationSeconds).toBeGreaterThan(3);
    expect(before - balanceMicro()).toBe([...text].length * SPEECH_PRICE * 1_000_000);
  });

  it("returns raw 24 kHz PCM for response_format pcm", async () => {
    const pcm = await speak("pcm words here", "pcm");
    expect(transcribeMockPcm(pcm)).toBe("pcm words here");
  });

  it("answers a WAV when no format is given, since the mock cannot encode mp3", async () => {
    const res = await post(gw, "/v1/audio/speech", {
      model: "mock-tts",
      input: "hi",
      voice: "alloy",
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("audio/wav");
  });

  it("answers 400 for formats the mock cannot produce, naming the ones it can, and charges nothing", async () => {
    const before = balanceMicro();
    for (const format of ["mp3", "opus", "flac"]) {
      const res = await post(gw, "/v1/audio/speech", {
        model: "mock-tts",
        input: "hi",
        voice: "alloy",
        response_format: format,
      });
      expect(res.status).toBe(400);
      const error = await errorOf(res);
      expect(error.code).toBe("bad_request");
      expect(error.message).toMatch(new RegExp(`response_format.*${format}.*wav, pcm`));
    }
    expect(balanceMicro()).toBe(before);
  });

  const cases: [string, object, number, string, RegExp][] = [
    ["a missing input", { model: "mock-tts", voice: "alloy" }, 400, "bad_request", /input/],
    [
      "an input that is not a string",
      { model: "mock-tts", voice: "alloy", input: ["x"] },
      400,
      "bad_request",
      /input/,
    ],
    ["a missing voice", { model: "mock-tts", input: "x" }, 400, "bad_request", /voice/],
    [
      "a speed out of range",
      { model: "mock-tts", input: "x", voice: "alloy", speed: 9 },
      400,
      "bad_request",
      /speed/,
    ],
    [
      "an unknown model",
      { model: "nope", input: "x", voice: "alloy" },
      400,
      "model_not_found",
      /nope/,
    ],
    [
      "a chat model",
      { model: "mock-gpt", input: "x", voice: "alloy" },
      503,
      "no_wire_for_modality",
      /speech/,
    ],
  ];
  for (const [what, body, status, code, message] of cases) {
    it(`answers ${status} ${code} for ${what}`, async () => {
      const res = await post(gw, "/v1/audio/speech", body);
      expect(res.status).toBe(status);
      const error = await errorOf(res);
      expect(error.code).toBe(code);
      expect(error.message).toMatch(message);
    });
  }

  it("charges nothing when the provider fails", async () => {
    const before = balanceMicro();
    const res = await post(gw, "/v1/audio/speech", {
      model: "down-tts",
      input: "hello",
      voice: "alloy",
      response_format: "wav",
    });
    expect(res.status).toBe(503);
    expect((await errorOf(res)).code).toBe("upstream_error");
    expect(balanceMicro()).toBe(before);
  });

  it("answers 402 for an account that cannot pay", async () => {
    const res = await post(
      gw,
      "/v1/audio/speech",
      { model: "mock-tts", input: "hello", voice: "alloy" },
      { authorization: `Bearer ${POOR_KEY}` },
    );
    expect(res.status).toBe(402);
  });
});

type WavLayout = {
  encoding: "pcm" | "float";
  bits: 8 | 16 | 24 | 32 | 64;
  channels: number;
  rate: number;
  extensible?: boolean;
};

/** A WAV of `samples` (values in [-1, 1], the same on every channel) in any common layout. */
function writeWav(samples: Float64Array, layout: WavLayout): Buffer {
  const { encoding, bits, channels, rate, extensible } = layout;
  const bytes = bits / 8;
  const data = Buffer.alloc(samples.length * channels * bytes);
  samples.forEach((value, frame) => {
    for (let channel = 0; channel < channels; channel++) {
      const at = (frame * channels + channel) * bytes;
      if (encoding === "float" && bits === 32) data.writeFloatLE(value, at);
      else if (encoding === "float") data.writeDoubleLE(value, at);
      else if (bits === 8) data[at] = Math.round(value * 127) + 128;
      else if (bits === 16) data.writeInt16LE(Math.round(value * 32767), at);
      else if (bits === 24) data.writeIntLE(Math.round(value * 8388607), at, 3);
      else data.writeInt32LE(Math.round(value * 2147483647), at);
    }
  });
  const tag = encoding === "float" ? 3 : 1;
  const fmt = Buffer.alloc(extensible ? 40 : 16);
  fmt.writeUInt16LE(extensible ? 0xfffe : tag, 0);
  fmt.writeUInt16LE(channels, 2);
  fmt.writeUInt32LE(rate, 4);
  fmt.writeUInt32LE(rate * channels * bytes, 8);
  fmt.writeUInt16LE(channels * bytes, 12);
  fmt.writeUInt16LE(bits, 14);
  if (extensible) {
    fmt.writeUInt16LE(22, 16); // cbSize
    fmt.writeUInt16LE(bits, 18); // valid bits
    fmt.writeUInt32LE(channels === 2 ? 3 : 4, 20); // channel mask
    // KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT: the tag, then the fixed GUID tail.
    fmt.writeUInt16LE(tag, 24);
    Buffer.from("000000001000800000aa00389b71", "hex").copy(fmt, 26);
  }
  const chunk = (id: string, body: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, "latin1");
    head.writeUInt32LE(body.length, 4);
    return Buffer.concat([head, body, Buffer.alloc(body.length & 1)]);
  };
  return chunk(
    "RIFF",
    Buffer.concat([Buffer.from("WAVE"), chunk("fmt ", fmt), chunk("data", data)]),
  );
}

/** A recording-like signal: a tone that rises and fades, with a little hashed noise. */
function recording(seconds: number, rate: number, pitch = 220): Float64Array {
  const out = new Float64Array(Math.round(seconds * rate));
  let noise = 12345;
  for (let i = 0; i < out.length; i++) {
    noise = (noise * 1103515245 + 12345) & 0x7fffffff;
    const t = i / rate;
    out[i] =
      0.5 * Math.sin(2 * Math.PI * pitch * (1 + t / 4) * t) * Math.min(1, 4 * (seconds - t)) +
      0.02 * (noise / 0x7fffffff - 0.5);
  }
  return out;
}

const layouts: [string, WavLayout][] = [
  ["PCM 8-bit mono 8 kHz", { encoding: "pcm", bits: 8, channels: 1, rate: 8000 }],
  ["PCM 16-bit stereo 44.1 kHz", { encoding: "pcm", bits: 16, channels: 2, rate: 44_100 }],
  ["PCM 24-bit mono 48 kHz", { encoding: "pcm", bits: 24, channels: 1, rate: 48_000 }],
  ["PCM 32-bit stereo 22.05 kHz", { encoding: "pcm", bits: 32, channels: 2, rate: 22_050 }],
  ["float 32-bit mono 16 kHz", { encoding: "float", bits: 32, channels: 1, rate: 16_000 }],
  ["float 64-bit stereo 11.025 kHz", { encoding: "float", bits: 64, channels: 2, rate: 11_025 }],
  [
    "EXTENSIBLE PCM 24-bit stereo 96 kHz",
    { encoding: "pcm", bits: 24, channels: 2, rate: 96_000, extensible: true },
  ],
  [
    "EXTENSIBLE float 32-bit stereo 48 kHz",
    { encoding: "float", bits: 32, channels: 2, rate: 48_000, extensible: true },
  ],
];

describe("POST /v1/audio/transcriptions on the mock provider: any WAV recording", () => {
  it.each(layouts)(
    "transcribes %s deterministically, timed and priced by its length",
    async (_, layout) => {
      const wav = writeWav(recording(2.5, layout.rate), layout);
      const transcribe = async () =>
        openai.audio.transcriptions.create({
          model: "mock-stt",
          file: await toFile(wav, "recording.wav", { type: "audio/wav" }),
          response_format: "verbose_json",
        });
      const before = balanceMicro();
      const first = await transcribe();
      expect(before - balanceMicro()).toBe(3 * TRANSCRIBE_PRICE * 1_000_000);
      expect(first.duration).toBeCloseTo(2.5, 2);
      expect(first.text.split(" ").length).toBeGreaterThanOrEqual(5);
      expect(first.text).toMatch(/^[A-Z][a-z ]+\./);
      expect((await transcribe()).text).toBe(first.text);
    },
  );

  it("hears different recordings differently, and longer ones at greater length", async () => {
    const layout: WavLayout = { encoding: "pcm", bits: 16, channels: 1, rate: 16_000 };
    const heard = async (samples: Float64Array) =>
      (
        await openai.audio.transcriptions.create({
          model: "mock-stt",
          file: await toFile(writeWav(samples, layout), "r.wav"),
        })
      ).text;
    const low = await heard(recording(2, 16_000, 220));
    const high = await heard(recording(2, 16_000, 440));
    const long = await heard(recording(20, 16_000, 220));
    expect(low).not.toBe(high);
    expect(long.split(" ").length).toBeGreaterThan(4 * low.split(" ").length);
    // The mock's own music is a recording like any other.
    expect(await heard(new Float64Array(0))).toMatch(/\.$/);
    const music = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(mockMusic("tune", 1), "tune.wav"),
    });
    expect(music.text.length).toBeGreaterThan(0);
  });

  it("still hears its own speech word for word, even re-encoded as float stereo EXTENSIBLE", async () => {
    const wav = await speak(text);
    const info = readWavInfo(wav);
    if (!info) throw new Error("not a WAV");
    const samples = new Float64Array((wav.length - 44) / 2);
    for (let i = 0; i < samples.length; i++) samples[i] = wav.readInt16LE(44 + 2 * i) / 32768;
    const floatStereo = writeWav(samples, {
      encoding: "float",
      bits: 32,
      channels: 2,
      rate: info.sampleRate,
      extensible: true,
    });
    const result = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(floatStereo, "speech.wav"),
    });
    expect(result.text).toBe(text);
  });
});

describe("POST /v1/audio/transcriptions on the mock provider", () => {
  it("hears exactly what the mock's speech said, priced per second of audio", async () => {
    const wav = await speak(text);
    const seconds = Math.ceil(readWavInfo(wav)!.durationSeconds);
    const before = balanceMicro();
    const result = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(wav, "speech.wav", { type: "audio/wav" }),
    });
    expect(result.text).toBe(text);
    expect(before - balanceMicro()).toBe(seconds * TRANSCRIBE_PRICE * 1_000_000);
  });

  it("answers text as text/plain", async () => {
    const wav = await speak("plain words");
    const result = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(wav, "speech.wav"),
      response_format: "text",
    });
    expect(result).toBe("plain words");
  });

  it("answers verbose_json with task, language, duration and timed segments", async () => {
    const wav = await speak(text);
    const duration = readWavInfo(wav)!.durationSeconds;
    const result = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(wav, "speech.wav"),
      response_format: "verbose_json",
      language: "en",
    });
    expect(result).toMatchObject({ task: "transcribe", language: "en", text });
    expect(result.duration).toBeCloseTo(duration, 1);
    const segments = result.segments ?? [];
    expect(segments.map((s) => s.text.trim())).toEqual([
      "Hello from the gateway.",
      "This sentence is spoken by the mock provider!",
    ]);
    expect(segments[0].start).toBe(0);
    expect(segments[1].end).toBeCloseTo(duration, 1);
  });

  it("times each word within its segment for timestamp_granularities[]=word, segments only when asked", async () => {
    const wav = await speak(text);
    const duration = readWavInfo(wav)!.durationSeconds;
    const words = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(wav, "speech.wav"),
      response_format: "verbose_json",
      timestamp_granularities: ["word"],
    });
    expect(words.segments).toBeUndefined();
    expect(words.words?.map((w) => w.word)).toEqual(text.replace(/[.!]/g, "").split(" "));
    const timed = words.words ?? [];
    expect(timed[0].start).toBe(0);
    expect(timed.at(-1)!.end).toBeCloseTo(duration, 1);
    for (const [i, word] of timed.entries()) {
      expect(word.end).toBeGreaterThan(word.start);
      if (i > 0) expect(word.start).toBe(timed[i - 1].end);
    }
    const both = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(wav, "speech.wav"),
      response_format: "verbose_json",
      timestamp_granularities: ["word", "segment"],
    });
    expect(both.words).toEqual(words.words);
    const [first, second] = both.segments ?? [];
    // "gateway." ends the first sentence: the word ends where its segment does.
    expect(timed.find((w) => w.word === "gateway")?.end).toBe(first.end);
    expect(timed.find((w) => w.word === "This")?.start).toBe(second.start);
  });

  it("answers 400 for timestamp granularities without verbose_json, or of an unknown kind", async () => {
    const wav = await speak("hello");
    for (const [format, granularity] of [
      ["json", "word"],
      ["verbose_json", "sentence"],
    ]) {
      const form = transcriptionForm(
        { model: "mock-stt", response_format: format },
        { bytes: wav, name: "a.wav" },
      );
      form.append("timestamp_granularities[]", granularity);
      const res = await postForm(form);
      expect(res.status).toBe(400);
      const error = await errorOf(res);
      expect(error.code).toBe("bad_request");
      expect(error.message).toContain("timestamp_granularities[]");
    }
  });

  it("answers srt and vtt subtitles", async () => {
    const wav = await speak("subtitle me");
    const srt = await postForm(
      transcriptionForm(
        { model: "mock-stt", response_format: "srt" },
        { bytes: wav, name: "a.wav" },
      ),
    );
    expect(await srt.text()).toMatch(/^1\n00:00:00,000 --> 00:00:\d\d,\d{3}\nsubtitle me\n/);
    const vtt = await postForm(
      transcriptionForm(
        { model: "mock-stt", response_format: "vtt" },
        { bytes: wav, name: "a.wav" },
      ),
    );
    expect(vtt.headers.get("content-type")).toMatch(/^text\/vtt/);
    expect(await vtt.text()).toMatch(/^WEBVTT\n\n00:00:00\.000 --> /);
  });

  it("answers 400 for a missing file, a missing model and an unknown response_format", async () => {
    const wav = await speak("x");
    const missingFile = await postForm(transcriptionForm({ model: "mock-stt" }));
    expect(missingFile.status).toBe(400);
    expect((await errorOf(missingFile)).message).toMatch(/file: required/);
    const missingModel = await postForm(transcriptionForm({}, { bytes: wav, name: "a.wav" }));
    expect(missingModel.status).toBe(400);
    expect((await errorOf(missingModel)).message).toMatch(/model/);
    const badFormat = await postForm(
      transcriptionForm(
        { model: "mock-stt", response_format: "xml" },
        { bytes: wav, name: "a.wav" },
      ),
    );
    expect(badFormat.status).toBe(400);
    expect((await errorOf(badFormat)).message).toMatch(/response_format/);
    const json = await post(gw, "/v1/audio/transcriptions", { model: "mock-stt" });
    expect(json.status).toBe(400);
    expect((await errorOf(json)).message).toMatch(/multipart\/form-data/);
  });

  it("answers 400 for a file that is not audio, and charges nothing", async () => {
    const before = balanceMicro();
    const notAudio = await postForm(
      transcriptionForm(
        { model: "mock-stt" },
        { bytes: Buffer.from("this is not audio at all"), name: "notes.wav" },
      ),
    );
    expect(notAudio.status).toBe(400);
    const e1 = await errorOf(notAudio);
    expect(e1.code).toBe("bad_request");
    expect(e1.message).toMatch(/file: the audio could not be decoded/);
    expect(balanceMicro()).toBe(before);
  });

  it("answers 413 for a file over 25 MB", async () => {
    const big = Buffer.alloc(25 * 1024 * 1024 + 1);
    const res = await postForm(
      transcriptionForm({ model: "mock-stt" }, { bytes: big, name: "big.wav" }),
    );
    expect(res.status).toBe(413);
    expect((await errorOf(res)).message).toMatch(/25 MB/);
  });

  it("answers 503 no_wire_for_modality for a speech model", async () => {
    const wav = await speak("x");
    const res = await postForm(
      transcriptionForm({ model: "mock-tts" }, { bytes: wav, name: "a.wav" }),
    );
    expect(res.status).toBe(503);
    expect((await errorOf(res)).code).toBe("no_wire_for_modality");
  });
});

describe("audio over the openai wire", () => {
  it("forwards speech with the mapped model and passes any format through", async () => {
    const res = await openai.audio.speech.create({
      model: "up-tts",
      input: "hi there",
      voice: "nova",
      response_format: "mp3",
    });
    expect(res.headers.get("content-type")).toBe("audio/mpeg");
    expect(Buffer.from(await res.arrayBuffer())).toEqual(fakeSpeechBytes);
    const forwarded = upstream.received.at(-1)!;
    expect(forwarded.path).toBe("/v1/audio/speech");
    expect(forwarded.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`);
    expect(JSON.parse(forwarded.body.toString())).toEqual({
      model: "gpt-4o-mini-tts",
      input: "hi there",
      voice: "nova",
      response_format: "mp3",
    });
  });

  it("moves past the mock in a route when it cannot produce the format", async () => {
    const res = await post(gw, "/v1/audio/speech", {
      model: "tts-route",
      input: "route me",
      voice: "alloy",
      response_format: "mp3",
    });
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer())).toEqual(fakeSpeechBytes);
    const wav = await post(gw, "/v1/audio/speech", {
      model: "tts-route",
      input: "route me",
      voice: "alloy",
      response_format: "wav",
    });
    expect(readWavInfo(new Uint8Array(await wav.arrayBuffer()))).not.toBeNull();
  });

  it("forwards transcriptions as multipart and bills the seconds the provider reports", async () => {
    // 20 KB holds 10 s at the worst-case 16 kbit/s; the provider then reports 7 s.
    const clip = Buffer.concat([Buffer.from("fake mp3 payload"), Buffer.alloc(20_000 - 16, 1)]);
    const before = balanceMicro();
    const result = await openai.audio.transcriptions.create({
      model: "up-stt",
      file: await toFile(clip, "clip.mp3", { type: "audio/mpeg" }),
      language: "id",
    });
    expect(result.text).toBe(fakeTranscriptText);
    const forwarded = upstream.received.at(-1)!;
    expect(forwarded.path).toBe("/v1/audio/transcriptions");
    expect(forwarded.headers["content-type"]).toMatch(/^multipart\/form-data; boundary=/);
    const raw = forwarded.body.toString("latin1");
    expect(raw).toContain('name="model"\r\n\r\nwhisper-1\r\n');
    expect(raw).toContain('name="language"\r\n\r\nid\r\n');
    expect(raw).toContain(
      'name="file"; filename="clip.mp3"\r\nContent-Type: audio/mpeg\r\n\r\nfake mp3 payload',
    );
    expect(forwarded.body.includes(clip)).toBe(true);
    expect(before - balanceMicro()).toBe(7 * 1_000_000);

    const plain = await openai.audio.transcriptions.create({
      model: "up-stt",
      file: await toFile(Buffer.from("x"), "clip.mp3"),
      response_format: "text",
    });
    expect(plain).toBe(fakeTranscriptText);
  });

  it("forwards every timestamp granularity and passes the provider's word timings on", async () => {
    const result = await openai.audio.transcriptions.create({
      model: "up-stt",
      file: await toFile(await speak("forward me"), "speech.wav"),
      response_format: "verbose_json",
      timestamp_granularities: ["word", "segment"],
    });
    expect(result.words?.map((w) => w.word)).toEqual(fakeTranscriptText.split(" "));
    expect(result.segments).toHaveLength(1);
    const sent = upstream.received.at(-1)!.body.toString("latin1");
    expect(sent.match(/name="timestamp_granularities\[\]"/g)).toHaveLength(2);
  });

  it("maps upstream errors without leaking the provider's body and charges nothing", async () => {
    const before = balanceMicro();
    for (const [upstreamStatus, status] of [
      [400, 400],
      [500, 503],
      [429, 429],
    ] as const) {
      const res = await postForm(
        transcriptionForm(
          { model: "up-stt-errors", prompt: `status=${upstreamStatus}` },
          { bytes: Buffer.from("x"), name: "a.mp3" },
        ),
      );
      const body = await res.text();
      expect(res.status).toBe(status);
      expect(body).not.toContain("provider-internal-detail");
    }
    expect(balanceMicro()).toBe(before);
  });
});
