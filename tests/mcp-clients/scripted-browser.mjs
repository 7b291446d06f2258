// The person at the browser, scripted, for the OAuth tests: follows an
// authorization URL's redirects by hand, keeping cookies (the provider's test
// interaction signs in as `login_hint` and consents), until the provider
// sends it to the client's redirect URI (`isRedirectUri`), whose URL it
// returns. The login is $MCP_LOGIN (default alice).

export async function authorize(authorizationUrl, isRedirectUri) {
  const url = new URL(authorizationUrl);
  url.searchParams.set("login_hint", process.env.MCP_LOGIN ?? "alice");
  const cookies = new Map();
  let next = url.href;
  for (let hop = 0; hop < 20; hop++) {
    const response = await fetch(next, {
      redirect: "manual",
      headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join("; ") },
    });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const at = pair.indexOf("=");
      cookies.set(pair.slice(0, at), pair.slice(at + 1));
    }
    const location = response.headers.get("location");
    if (!location) {
      throw new Error(`the provider answered ${response.status} without a redirect: ${await response.text()}`);
    }
    const target = new URL(location, next);
    if (isRedirectUri(target)) {
      if (target.searchParams.get("error")) {
        const error = target.searchParams.get("error");
        throw new Error(`authorization refused: ${error}: ${target.searchParams.get("error_description")}`);
      }
      return target;
    }
    next = target.href;
  }
  throw new Error("too many redirects");
}
