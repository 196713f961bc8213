import { GatewayError } from "../../errors.js";
import { readAviInfo } from "../../media/avi.js";
import { readWavInfo } from "../../media/wav.js";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import { embeddingBase64, type ProducedMedia, type Provider } from "../provider.js";
import { mockComplete } from "./chat.js";
import {
  extendMockVideo,
  isMockSpeechFormat,
  mockImageEdit,
  mockMusic,
  mockVideo,
  mockVideoSize,
} from "./media/index.js";
import {
  hearUpload,
  mockEmbedding,
  mockEmbeddingDimensions,
  mockImages,
  mockJobMs,
  mockMediaPreamble,
  mockSpeechAudio,
  unreadableEditUpload,
  unsupportedSpeechFormat,
} from "./media-answers.js";
import { renderTranscript } from "./transcript.js";

/**
 * The built-in provider: chat in every client style through wire/to-client.ts, and real PNG, WAV and
 * AVI bytes for every media modality, all made inside the gateway.
 */
export const mockProvider: Provider = {
  needsBaseUrl: false,
  builtIn: true,
  servesNatively: (style) => style === "chat",
  // A legacy completion's fill-in-the-middle and echo, answered through its chat.
  textCompletions: () => ["suffix", "echo"],
  refuses: {
    speech: ({ body }) => {
      const format = body.response_format;
      return format !== undefined && !isMockSpeechFormat(format)
        ? unsupportedSpeechFormat(format)
        : undefined;
    },
    transcription: (file) => {
      const heard = hearUpload(file.bytes);
      return heard instanceof Error ? heard : undefined;
    },
    edit: unreadableEditUpload,
  },
  videoSize(asked) {
    const { width, height } = mockVideoSize(asked);
    return `${width}x${height}`;
  },
  complete: mockComplete,

  async embed(_ctx, attempt, { body, inputs, signal }) {
    await mockMediaPreamble(attempt.provider, inputs[0]?.text ?? "", signal);
    const dimensions = body.dimensions ?? mockEmbeddingDimensions;
    const inputTokens = inputs.reduce((sum, input) => sum + input.tokens, 0);
    return {
      body: {
        object: "list",
        data: inputs.map((input, index) => {
          const vector = mockEmbedding(input.text, dimensions);
          return {
            object: "embedding",
            index,
            embedding: body.encoding_format === "base64" ? embeddingBase64(vector) : [...vector],
          };
        }),
        usage: { prompt_tokens: inputTokens, total_tokens: inputTokens },
      },
    };
  },

  async image(_ctx, attempt, { body, size, n, signal }) {
    await mockMediaPreamble(attempt.provider, body.prompt, signal);
    return pictures(mockImages(body.prompt, size, n), body.prompt);
  },

  async imageEdit(_ctx, attempt, { prompt, size, images, mask, n, signal }) {
    await mockMediaPreamble(attempt.provider, prompt, signal);
    asRouteStep(() => {
      const refusal = unreadableEditUpload({ images, mask });
      if (refusal) throw refusal;
    });
    const first = images[0].bytes;
    const edited = Array.from({ length: n }, (_, i) =>
      mockImageEdit(first, i === 0 ? prompt : `${prompt}\n#${i + 1}`, size, mask?.bytes),
    );
    return pictures(edited, prompt);
  },

  async speech(_ctx, attempt, { body, signal }) {
    await mockMediaPreamble(attempt.provider, body.input, signal);
    return asRouteStep(() => mockSpeechAudio(body.input, body.response_format));
  },

  async transcribe(_ctx, attempt, req) {
    const prompt = req.fields.prompt;
    await mockMediaPreamble(attempt.provider, typeof prompt === "string" ? prompt : "", req.signal);
    const heard = asRouteStep(() => {
      const upload = hearUpload(req.file.bytes);
      if (upload instanceof Error) throw upload;
      return upload;
    });
    return { ...renderTranscript(heard, req), seconds: heard.durationSeconds };
  },

  async music(_ctx, attempt, req) {
    await req.wait(mockJobMs(attempt.provider));
    await mockMediaPreamble(attempt.provider, req.prompt, req.signal);
    const bytes = mockMusic(req.prompt, req.seconds);
    return {
      bytes,
      contentType: "audio/wav",
      duration: readWavInfo(bytes)?.durationSeconds ?? req.seconds,
    };
  },

  async video(_ctx, attempt, req) {
    await req.wait(mockJobMs(attempt.provider));
    await mockMediaPreamble(attempt.provider, req.prompt, req.signal);
    const bytes =
      req.kind === "video_extension" && req.source
        ? extendMockVideo(req.source, req.prompt, req.seconds)
        : mockVideo(req.prompt, { seconds: req.seconds, ...mockVideoSize(req.size) });
    return video(bytes, req.seconds);
  },
};

function video(bytes: Buffer, seconds: number): ProducedMedia {
  return {
    bytes,
    contentType: "video/x-msvideo",
    duration: readAviInfo(bytes)?.durationSeconds ?? seconds,
  };
}

function pictures(made: Buffer[], prompt: string) {
  return {
    data: made.map((png) => ({ b64_json: png.toString("base64"), revised_prompt: prompt })),
  };
}

/**
 * Inside a route mixing the mock with other providers, the mock refusing a format or a file
 * moves the request on to the next step. (When every candidate refuses, the clear 400 was already
 * answered before dispatch.)
 */
function asRouteStep<T>(mockCall: () => T): T {
  try {
    return mockCall();
  } catch (err) {
    if (err instanceof GatewayError && err.status === 400) {
      throw new UpstreamFailure("rejected", 400, "invalid_request_error");
    }
    throw err;
  }
}
