/**
 * OpenAI Responses API wire shapes, as far as the gateway reads or writes them.
 * Only function tools and text/image/file content are translated; everything else is
 * typed loosely so it can be recognised and skipped.
 */

export type Extra = { [key: string]: unknown };

export type ResponsesInputContent =
  | ({ type: "input_text"; text: string } & Extra)
  | ({
      type: "input_image";
      image_url?: string | null;
      file_id?: string | null;
      detail?: string;
    } & Extra)
  | ({ type: "input_file"; file_data?: string; file_id?: string; filename?: string } & Extra)
  | ({ type: "output_text"; text: string } & Extra)
  | ({ type: "refusal"; refusal: string } & Extra)
  | ({ type: string } & Extra);

export type ResponsesMessageItem = {
  type?: "message";
  role: "user" | "assistant" | "system" | "developer";
  content: string | ResponsesInputContent[];
  id?: string;
  status?: string;
} & Extra;

export type ResponsesFunctionCallItem = {
  type: "function_call";
  call_id: string;
  name: string;
  arguments: string;
  id?: string;
  status?: string;
} & Extra;

export type ResponsesFunctionCallOutputItem = {
  type: "function_call_output";
  call_id: string;
  output: string | ResponsesInputContent[];
  id?: string;
} & Extra;

export type ResponsesInputItem =
  | ResponsesMessageItem
  | ResponsesFunctionCallItem
  | ResponsesFunctionCallOutputItem
  | ({ type: string } & Extra);

export type ResponsesFunctionTool = {
  type: "function";
  name: string;
  description?: string | null;
  parameters?: { [key: string]: unknown } | null;
  strict?: boolean | null;
} & Extra;
export type ResponsesTool = ResponsesFunctionTool | ({ type: string } & Extra);

export type ResponsesToolChoice =
  | "auto"
  | "none"
  | "required"
  | { type: "function"; name: string }
  | ({ type: string } & Extra);

export type ResponsesTextFormat =
  | { type: "text" }
  | { type: "json_object" }
  | {
      type: "json_schema";
      name: string;
      schema: { [key: string]: unknown };
      description?: string;
      strict?: boolean | null;
    };

export type ResponsesRequest = {
  model: string;
  input?: string | ResponsesInputItem[];
  instructions?: string | null;
  tools?: ResponsesTool[];
  tool_choice?: ResponsesToolChoice;
  parallel_tool_calls?: boolean | null;
  max_output_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  stream?: boolean | null;
  text?: { format?: ResponsesTextFormat } & Extra;
  reasoning?: { effort?: string | null; summary?: string | null } & Extra;
  metadata?: { [key: string]: string } | null;
  user?: string;
  safety_identifier?: string;
  previous_response_id?: string | null;
  store?: boolean | null;
} & Extra;

export type ResponsesOutputText = {
  type: "output_text";
  text: string;
  annotations: unknown[];
  logprobs?: unknown[];
};
export type ResponsesOutputRefusal = { type: "refusal"; refusal: string };

export type ResponsesOutputMessage = {
  type: "message";
  id: string;
  status: "in_progress" | "completed" | "incomplete";
  role: "assistant";
  content: Array<ResponsesOutputText | ResponsesOutputRefusal>;
};

export type ResponsesOutputFunctionCall = {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  /** The namespace tool group the function belongs to, as the request declared it. */
  namespace?: string;
  arguments: string;
  status: "in_progress" | "completed" | "incomplete";
};

/** A call of a `custom` tool: the model's free-form `input` (the API gives it no status). */
export type ResponsesOutputCustomToolCall = {
  type: "custom_tool_call";
  id: string;
  call_id: string;
  name: string;
  /** The namespace tool group the tool belongs to, as the request declared it. */
  namespace?: string;
  input: string;
};

/**
 * The model's thinking: a reasoning summary where the request asked for one, and the signed
 * reasoning where it included `reasoning.encrypted_content`.
 */
export type ResponsesOutputReasoning = {
  type: "reasoning";
  id: string;
  summary: ResponsesSummaryText[];
  encrypted_content?: string;
};
export type ResponsesSummaryText = { type: "summary_text"; text: string };

export type ResponsesOutputItem =
  | ResponsesOutputReasoning
  | ResponsesOutputMessage
  | ResponsesOutputFunctionCall
  | ResponsesOutputCustomToolCall;

export type ResponsesUsage = {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
};

export type ResponsesStatus = "completed" | "failed" | "in_progress" | "incomplete";

export type ResponseObject = {
  id: string;
  object: "response";
  created_at: number;
  status: ResponsesStatus;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: "max_output_tokens" | "content_filter" } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  model: string;
  output: ResponsesOutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  reasoning: { effort: string | null; summary: string | null };
  store: boolean;
  temperature: number | null;
  text: { format: ResponsesTextFormat };
  tool_choice: ResponsesToolChoice;
  tools: ResponsesTool[];
  top_p: number | null;
  truncation: "auto" | "disabled";
  /** Absent until the response has finished (or failed). */
  usage?: ResponsesUsage;
  user?: string;
  metadata: { [key: string]: string };
  /** OpenAI's domain access programs (its Cyber program) that served the request. */
  access_programs: { cyber: string } | null;
  /** The tier that served the answer, where its provider said (as OpenAI names tiers). */
  service_tier?: string;
  /** The conversation the response was added to, when the request named one. */
  conversation?: { id: string } | null;
};

/** One Responses SSE event: the `event:` name equals `data.type`; data carries `sequence_number`. */
export type ResponsesSSEEvent = {
  event: string;
  data: { type: string; sequence_number: number } & Extra;
};
