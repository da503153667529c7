-- Every table sized from its content: pandoc gives a pipe table with a line longer than --columns relative column
-- widths from its dashes, which Typst then holds to (a column of long values got a sixth of the page and its cells
-- ran to twenty hyphenated lines). With the default widths Typst's auto columns and the browser's table layout
-- size each column from its cells, and wrap only what does not fit.
-- A long name in a cell's text (a claim name, 24 characters or more) may break after an underscore or a dot between
-- letters, in Typst (a zero-width space there; one ran past the margin). Code is left whole, so that a name copied
-- from the appendix is the name; numbers are never touched.
-- Shared by `quarto render` (the extension's filters) and offload-lab's pandoc + Typst build.
local BREAK = pandoc.RawInline("typst", "#sym.zws;")

local function breakable(s)
  if #s.text < 24 or not s.text:match("[_%a]") then return nil end
  local out, rest = {}, s.text
  while true do
    local u, d = rest:find("_"), rest:find("%a%.%a")
    if not u and not d then break end
    local cut = (u and (not d or u <= d + 1)) and u or d + 1
    table.insert(out, pandoc.Str(rest:sub(1, cut)))
    table.insert(out, BREAK)
    rest = rest:sub(cut + 1)
  end
  if #out == 0 then return nil end
  table.insert(out, pandoc.Str(rest))
  return out
end

function Table(tbl)
  for i, spec in ipairs(tbl.colspecs) do
    tbl.colspecs[i] = { spec[1], nil }
  end
  return tbl:walk({ Str = breakable })
end
