/**
 * BYTES tensor data for tests: building it from strings, and reading its elements back to compare contents. Tests
 * compare elements (or their text) rather than two BytesData objects, so that an assertion says what it checks
 * whatever the deep-equality library makes of the class.
 */
import { BytesData } from '../../common/protocol/bytes-data.ts'
import { type TensorData } from '../../common/protocol/types.ts'

/** BYTES data holding `elements`, strings stored as UTF-8. */
export function bytes (...elements: Array<Uint8Array | string>): BytesData {
  return BytesData.from(elements)
}

/** The elements of BYTES data, each a view; throws on anything else, so a wrong storage fails the test plainly. */
export function elementsOf (data: TensorData | undefined): Uint8Array[] {
  if (!(data instanceof BytesData)) throw new TypeError(`expected BYTES data (a BytesData), got ${String(data)}`)
  return data.toArray()
}

const utf8 = new TextDecoder()

/** The elements of BYTES data decoded as UTF-8; throws on anything else (see {@link elementsOf}). */
export function stringsOf (data: TensorData | undefined): string[] {
  return elementsOf(data).map(e => utf8.decode(e))
}
