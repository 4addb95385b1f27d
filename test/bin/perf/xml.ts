/**
 * A small XML well-formedness check for tests (no XML parser is a dependency): one root element, every tag
 * closed in order, attributes quoted and not repeated, entities among the five predefined ones or numeric.
 */
export function checkWellFormedXml (text: string): void {
  let s = text.replace(/^<\?xml[^?]*\?>\s*/, '')
  const stack: string[] = []
  let roots = 0
  const entity = /&(?!(?:amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)/
  while (s.length > 0) {
    const lt = s.indexOf('<')
    const textPart = lt === -1 ? s : s.slice(0, lt)
    if (entity.test(textPart)) throw new Error(`a bare & in text near '${textPart.slice(0, 40)}'`)
    if (stack.length === 0 && textPart.trim() !== '') throw new Error(`text outside the root: '${textPart.slice(0, 40)}'`)
    if (lt === -1) break
    s = s.slice(lt)
    if (s.startsWith('<!--')) {
      const end = s.indexOf('-->')
      if (end === -1) throw new Error('an unclosed comment')
      s = s.slice(end + 3)
      continue
    }
    const close = /^<\/([A-Za-z_][\w.:-]*)\s*>/.exec(s)
    if (close !== null) {
      const open = stack.pop()
      if (open !== close[1]) throw new Error(`</${close[1]}> closes <${open ?? 'nothing'}>`)
      s = s.slice(close[0].length)
      continue
    }
    const tag = /^<([A-Za-z_][\w.:-]*)((?:\s+[A-Za-z_][\w.:-]*\s*=\s*(?:"[^"<]*"|'[^'<]*'))*)\s*(\/?)>/.exec(s)
    if (tag === null) throw new Error(`a malformed tag near '${s.slice(0, 60)}'`)
    const names = [...tag[2]!.matchAll(/([A-Za-z_][\w.:-]*)\s*=/g)].map((m) => m[1])
    if (new Set(names).size !== names.length) throw new Error(`a repeated attribute in <${tag[1]}>`)
    for (const m of tag[2]!.matchAll(/=\s*(?:"([^"]*)"|'([^']*)')/g)) {
      if (entity.test(m[1] ?? m[2] ?? '')) throw new Error(`a bare & in an attribute of <${tag[1]}>`)
    }
    if (stack.length === 0) roots++
    if (tag[3] !== '/') stack.push(tag[1]!)
    s = s.slice(tag[0].length)
  }
  if (stack.length > 0) throw new Error(`unclosed <${stack.join('>, <')}>`)
  if (roots !== 1) throw new Error(`${roots} root elements`)
}
