"""gobrrr's JSON text: indented, tables (lists of flat dicts) one row per line, the same
value as json.dumps gives but for table rows' floats, kept to TABLE_DIGITS digits."""

import json
import math

from gobrrr import jsontext


def test_tables_are_one_row_per_line_and_the_value_is_unchanged():
    data = {"n": 1, "rows": [{"i": i, "op": "aten::mm"} for i in range(4)],
            "inner": {"few": [{"z": 1}], "nums": [1, 2]}}
    text = jsontext.dumps(data)
    assert json.loads(text) == data
    assert text == "\n".join([
        '{',
        '  "n": 1,',
        '  "rows": [',
        '    {"i": 0, "op": "aten::mm"},',
        '    {"i": 1, "op": "aten::mm"},',
        '    {"i": 2, "op": "aten::mm"},',
        '    {"i": 3, "op": "aten::mm"}',
        '  ],',
        '  "inner": {',
        '    "few": [',
        '      {',
        '        "z": 1',
        '      }',
        '    ],',
        '    "nums": [',
        '      1,',
        '      2',
        '    ]',
        '  }',
        '}'])


def test_nested_tables_keep_their_indent_and_odd_values_are_written_as_json_does():
    rows = [{"t": 1e-05, "s": None, "b": True, "u": "é\"q"} for _ in range(jsontext.MIN_TABLE_ROWS)]
    data = [{"deep": {"rows": rows}}, rows, {"path": object()}]
    text = jsontext.dumps(data)
    back = json.loads(text)
    assert back[:2] == [{"deep": {"rows": rows}}, rows]
    assert back[2]["path"].startswith("<object object")  # default=str, as before
    assert '        {"t": 1e-05, "s": null, "b": true, "u": "\\u00e9\\"q"},' in text.splitlines()


def test_table_floats_keep_six_significant_digits_and_nothing_else_changes():
    rows = [{"t": 7.349566313303171e-07, "n": 123456789, "f": 0.4375221766167221,
             "inf": math.inf, "b": False} for _ in range(jsontext.MIN_TABLE_ROWS)]
    data = {"rows": rows, "whole": 0.4375221766167221}
    back = json.loads(jsontext.dumps(data))
    assert back["whole"] == 0.4375221766167221  # outside a table: the full value
    assert back["rows"][0] == {"t": 7.34957e-07, "n": 123456789, "f": 0.437522,
                               "inf": math.inf, "b": False}
