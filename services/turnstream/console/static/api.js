// The console's only way to the server: the HTTP API (docs/http.md), with the API key the
// user logged in with, and tickets for the streams (an EventSource cannot send headers).

const KEY = "turnstream.key";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export const auth = {
  get key() {
    return localStorage.getItem(KEY);
  },
  set key(value) {
    if (value) localStorage.setItem(KEY, value);
    else localStorage.removeItem(KEY);
  },
  onUnauthenticated: () => {},
};

export async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (auth.key) headers.Authorization = `Bearer ${auth.key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: `${response.status} ${response.statusText}: not JSON (a proxy in the way?)` };
  }
  if (!response.ok) {
    if (response.status === 401) auth.onUnauthenticated();
    throw new ApiError(response.status, data || {});
  }
  return data;
}

export const post = (path, body) => api(path, { method: "POST", body });

/** The bytes at `path` (an attachment) as an object URL, fetched with the key. */
export async function blobUrl(path) {
  const headers = auth.key ? { Authorization: `Bearer ${auth.key}` } : {};
  const response = await fetch(path, { headers });
  if (!response.ok) {
    if (response.status === 401) auth.onUnauthenticated();
    let problem = {};
    try {
      problem = await response.json();
    } catch {
      /* not a problem document */
    }
    throw new ApiError(response.status, problem);
  }
  return URL.createObjectURL(await response.blob());
}
const enc = encodeURIComponent;

/** The `limit` sessions changed last (latest first, in `status` only if given) and how
 * many sessions there are: `{items, total}`. */
export function recentSessions(limit, status, signal) {
  const q = status ? `&status=${enc(status)}` : "";
  return api(`/v1/sessions?order=recent&limit=${limit}${q}`, { signal });
}

/** Every session summary, following the pages (the audit view verifies them all). */
export async function allSessions(signal) {
  const items = [];
  let after = null;
  do {
    const q = after ? `&after=${enc(after)}` : "";
    const page = await api(`/v1/sessions?limit=1000${q}`, { signal });
    items.push(...page.items);
    after = page.next;
  } while (after);
  return items;
}

/** A session's whole log, following the pages. */
export async function allEvents(session) {
  const items = [];
  let after = 0;
  for (;;) {
    const page = await api(`/v1/sessions/${enc(session)}/events?after=${after}&limit=1000`);
    items.push(...page.items);
    if (!page.next) return items;
    after = page.next;
  }
}

/**
 * A session's events, replayed then live, resumed after the last one seen whenever the
 * connection drops (a server restart, an expired ticket): a new ticket, `?after=<last>`.
 * `on.event(seq, type, data)`, `on.token(data)`, `on.status("live" | "reconnecting")`.
 */
export function follow(session, on, after = 0) {
  let last = after;
  let source = null;
  let stopped = false;
  let delay = 500;
  let timer = null;

  async function open() {
    if (stopped) return;
    try {
      const { ticket } = await post("/v1/tickets", { sessionId: session });
      if (stopped) return;
      const url = `/v1/sessions/${enc(session)}/stream?after=${last}&ticket=${enc(ticket)}`;
      source = new EventSource(url);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
        on.status?.("denied", error.message);
        return;
      }
      retry();
      return;
    }
    source.onopen = () => {
      delay = 500;
      on.status?.("live");
    };
    source.onerror = () => {
      // the browser's own retry would reuse a ticket that may have expired: resume ourselves
      source.close();
      retry();
    };
    source.addEventListener("token", (m) => on.token?.(JSON.parse(m.data)));
    source.onmessage = null;
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (m) => {
        const seq = Number(m.lastEventId);
        if (seq <= last) return;
        last = seq;
        on.event(seq, type, JSON.parse(m.data));
      });
    }
  }

  function retry() {
    if (stopped) return;
    on.status?.("reconnecting");
    clearTimeout(timer);
    // jittered: after a restart of the server, its consoles do not all come back at once
    timer = setTimeout(open, delay * (0.5 + Math.random()));
    delay = Math.min(delay * 2, 5000);
  }

  open();
  return {
    close() {
      stopped = true;
      clearTimeout(timer);
      source?.close();
    },
    get last() {
      return last;
    },
  };
}

// SSE `event:` names are the log's event types (schemas/events.json)
export const EVENT_TYPES = [
  "InputAccepted", "InputRejected", "SteeringInjected", "FollowUpQueued", "InterruptReceived",
  "SessionTurnStart", "StagePreFired", "StagePostFired", "RenderEmitted", "TurnEnded",
  "SessionTurnEnd", "ProviderRequestStarted", "ProviderRequestCompleted",
  "ProviderRequestFailed", "ProviderRetry", "ContextCompacted", "ToolInvocationProposed",
  "ToolCallModeInvoked", "ToolCallApproved", "ToolCallDenied", "InteractionRequested",
  "InteractionAnswered", "ToolInvocationRequested", "ToolInvocationStarted",
  "ToolInvocationSucceeded", "ToolInvocationFailed", "ToolInvocationCancelled", "HookDecided",
  "AuditViolation", "WorkflowAttached", "StageEntered", "StageInitFailed",
  "StageCheckGateResult", "StageCompletionChecked", "StageAssertOutcome", "StageGranted",
  "StageCancelled", "StageExited", "WorkflowExit", "SessionConfigured", "MessageSent",
  "MessageDropped", "SubTurnSpawned", "SubTurnEnded", "SubTurnResultDelivered",
  "ProviderFallback", "ContextProvided", "ContextSkipped", "PushNotificationAbandoned",
];
