/** Small HTTP helpers for tests: every call goes to 127.0.0.1 servers the test started itself. */
import { request } from 'undici'

export interface HttpResult {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
  /** The body parsed as JSON, or undefined when it is empty or not JSON. */
  json: any
}

export async function http (method: string, url: string, body?: string | Buffer | object, headers: Record<string, string> = {}): Promise<HttpResult> {
  const payload = body === undefined || typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body)
  const res = await request(url, { method: method as 'GET', headers, ...(payload !== undefined ? { body: payload } : {}) })
  const text = await res.body.text()
  let json: unknown
  try { json = text === '' ? undefined : JSON.parse(text) } catch { json = undefined }
  return { status: res.statusCode, headers: res.headers, text, json }
}

export const get = (url: string, headers?: Record<string, string>): Promise<HttpResult> => http('GET', url, undefined, headers)
export const post = (url: string, body?: string | Buffer | object, headers?: Record<string, string>): Promise<HttpResult> =>
  http('POST', url, body, headers)
