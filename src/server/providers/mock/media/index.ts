/**
 * Deterministic, offline media for the built-in `mock` provider: same input, same bytes,
 * generated in milliseconds with nothing but Node built-ins.
 */
export { type AviInfo, readAviInfo } from "./avi.js";
export {
  MAX_MUSIC_SECONDS,
  MOCK_MUSIC_SAMPLE_RATE,
  type MockMusicOptions,
  mockMusic,
} from "./music.js";
export {
  decodeRgbaPng,
  encodePng,
  type ImageSize,
  MAX_IMAGE_SIDE,
  mockImage,
  mockImageEdit,
  parseSize,
  readPngSize,
} from "./png.js";
export {
  hearMockSpeech,
  isMockSpeechFormat,
  MOCK_SPEECH_SAMPLE_RATE,
  type MockSpeechFormat,
  type MockSpeechOptions,
  mockHeardText,
  mockSpeech,
  speechContentType,
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
} from "./video.js";
export { type DecodedWav, decodeWav, encodeWav, readWavInfo, type WavInfo } from "./wav.js";
