/**
 * Deterministic, offline media for the built-in `mock` provider: same input, same bytes,
 * generated in milliseconds with nothing but Node built-ins (the formats' codecs are the
 * gateway's, in src/server/media/).
 */
export {
  MOCK_MUSIC_SAMPLE_RATE,
  type MockMusicOptions,
  mockMusic,
} from "./music.js";
export { mockImage, mockImageEdit } from "./picture.js";
export {
  hearMockSpeech,
  isMockSpeechFormat,
  MOCK_SPEECH_SAMPLE_RATE,
  type MockSpeechFormat,
  type MockSpeechOptions,
  mockHeardText,
  mockSpeech,
  speechSeconds,
  supportedMockSpeechFormats,
  transcribeMockPcm,
  transcribeMockWav,
} from "./speech.js";
export {
  extendMockVideo,
  MAX_VIDEO_BYTES,
  MAX_VIDEO_FPS,
  MAX_VIDEO_SIDE,
  MOCK_VIDEO_DEFAULTS,
  type MockVideoOptions,
  mockVideo,
  mockVideoSize,
} from "./video.js";
